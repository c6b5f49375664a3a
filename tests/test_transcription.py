"""Audio transcription through an OpenAI-compatible provider (a local server
speaking ``POST /v1/audio/transcriptions``: multipart in, verbose_json out):
an uploaded WAV is held, transcribed by its job and stored with a segment
per stretch of speech; a provider that refuses the file dead-letters the job
and says so on the note; without a provider an audio file is its metadata."""

from __future__ import annotations

import io
import json
import threading
import wave
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.ingest.transcripts import compose
from app.main import create_app
from app.providers.transcription.base import Cue, Transcript
from app.settings import Settings
from tests.docserver import serving
from tests.test_documents import found, note, upload
from tests.test_pipeline import jobs_of, put, run_all

KEY = "sk-test-transcription"
SPOKEN = [
    (0.0, 2.5, "Good morning, this is the lighthouse keeper."),
    (2.5, 6.0, "The fog horn on Berlenga island failed at midnight."),
]


@dataclass
class Whisper:
    """An OpenAI-compatible transcription endpoint that keeps what it got."""

    status: int = 200
    got: list[dict[str, Any]] = field(default_factory=list)

    def reply(self) -> dict[str, Any]:
        segments = [
            {"id": i, "start": s, "end": e, "text": " " + t} for i, (s, e, t) in enumerate(SPOKEN)
        ]
        return {
            "task": "transcribe",
            "language": "english",
            "duration": 6.0,
            "text": " ".join(t for _, _, t in SPOKEN),
            "segments": segments,
        }


@pytest.fixture
def whisper() -> Iterator[tuple[Whisper, str]]:
    state = Whisper()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            head = f"Content-Type: {self.headers.get('content-type', '')}\r\n\r\n".encode()
            form = BytesParser(policy=HTTP).parsebytes(head + body)
            fields: dict[str, str] = {}
            files: dict[str, tuple[str | None, bytes]] = {}
            for part in form.iter_parts():
                name = str(part.get_param("name", header="content-disposition"))
                data = part.get_payload(decode=True)
                if part.get_filename() is not None:
                    files[name] = (part.get_filename(), data)
                else:
                    fields[name] = data.decode()
            state.got.append(
                {
                    "path": self.path,
                    "auth": self.headers.get("authorization"),
                    "fields": fields,
                    "files": files,
                }
            )
            if state.status == 200:
                out = json.dumps(state.reply()).encode()
            else:
                out = json.dumps({"error": {"message": "Invalid file format."}}).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
async def heard(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """The API of a server with a transcription provider configured."""
    app = create_app(settings.model_copy(update={"transcription_provider": "openai"}), db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://keepmem.test") as c:
            yield c


def wav(seconds: float = 1.0) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * int(8000 * seconds))
    return out.getvalue()


def transcribing(make_pipeline: Any, url: str, **more: Any) -> Any:
    return make_pipeline(
        transcription_provider="openai",
        transcription_base_url=url,
        transcription_api_key=SecretStr(KEY),
        **more,
    )


async def blobs(db: Database, tenant_id: Any) -> int:
    async with tenancy.tenant_id_transaction(db, tenant_id) as s:
        return int((await s.execute(text("SELECT count(*) FROM blobs"))).scalar_one())


async def test_uploaded_audio_is_transcribed_with_times(
    heard, tenant, whisper, make_pipeline, db
) -> None:
    vendor, url = whisper
    audio = wav()
    made = await upload(heard, tenant, audio, "standup.wav", "audio/wav", id="standup")
    assert made["pending"] == ["transcribe"] and "transcript to follow" in made["summary"]
    assert await blobs(db, tenant.id) == 1  # held until its job is done
    assert await found(heard, tenant, "fog horn Berlenga") == []

    assert await run_all(transcribing(make_pipeline, url), heard, tenant) == ["done"]
    (sent,) = vendor.got
    assert sent["path"] == "/v1/audio/transcriptions"
    assert sent["auth"] == f"Bearer {KEY}"
    assert sent["fields"] == {
        "model": "whisper-1",
        "response_format": "verbose_json",
        "timestamp_granularities[]": "segment",
    }
    assert sent["files"]["file"] == ("standup.wav", audio)

    (job,) = await jobs_of(heard, tenant, kind="transcribe")
    assert job["status"] == "done"
    assert job["result"]["transcriber"] == "openai:whisper-1"
    assert job["result"]["segments"] == 2 and job["result"]["chars"] > 80
    assert await found(heard, tenant, "fog horn Berlenga") == ["standup"]
    got = await note(heard, tenant, "standup")
    assert "_pending_document" not in got["tags"] and got["tags"]["duration"] == "1s"
    assert got["tags"]["_content_type"] == "audio/wav"
    assert await blobs(db, tenant.id) == 0


async def test_a_provider_refusal_dead_letters_and_says_so(
    heard, tenant, whisper, make_pipeline, db
) -> None:
    vendor, url = whisper
    vendor.status = 400
    await upload(heard, tenant, wav(), "broken.wav", "audio/wav", id="broken")
    assert await run_all(transcribing(make_pipeline, url), heard, tenant) == ["dead"]
    (job,) = await jobs_of(heard, tenant, kind="transcribe")
    assert job["status"] == "dead" and job["attempts"] == 1  # a 4xx is not retried
    assert "HTTP 400" in job["last_error"] and "Invalid file format" in job["last_error"]
    got = await note(heard, tenant, "broken")
    assert "transcription failed" in got["summary"] and "HTTP 400" in got["summary"]
    assert "_pending_document" not in got["tags"]
    assert await blobs(db, tenant.id) == 0


async def test_a_provider_outage_is_retried(heard, tenant, whisper, make_pipeline) -> None:
    vendor, url = whisper
    vendor.status = 503
    await upload(heard, tenant, wav(), "later.wav", "audio/wav", id="later")
    assert await run_all(transcribing(make_pipeline, url), heard, tenant) == ["retry"]
    (job,) = await jobs_of(heard, tenant, kind="transcribe")
    assert job["status"] == "pending" and "HTTP 503" in job["last_error"]


async def test_without_a_provider_audio_is_its_metadata(client, tenant, make_pipeline) -> None:
    made = await upload(client, tenant, wav(), "memo.wav", "audio/wav", id="memo")
    assert "transcribe" not in made["pending"]
    assert made["summary"].startswith("Audio recording") and "duration 1s" in made["summary"]
    await run_all(make_pipeline(), client, tenant)
    assert await jobs_of(client, tenant, kind="transcribe") == []


async def test_audio_fetched_by_uri_is_transcribed_inline(
    client, tenant, whisper, make_pipeline
) -> None:
    vendor, url = whisper
    with serving() as web:
        audio = web.add("/talks/harbour.wav", wav(), "audio/wav")
        await put(client, tenant, uri=audio)
        pipeline = transcribing(make_pipeline, url, fetch_allow_networks=["127.0.0.1/32"])
        assert await run_all(pipeline, client, tenant) == ["done"]
    assert vendor.got[0]["files"]["file"][0] == "harbour.wav"
    assert await found(client, tenant, "lighthouse keeper") == [audio]


def test_transcript_segments_point_at_their_lines() -> None:
    cues = [Cue(s, e, t) for s, e, t in SPOKEN]
    made = compose("Audio recording. duration 6s.", Transcript("ignored", cues))
    assert made.text.startswith("Audio recording. duration 6s.\n\n")
    assert made.segments[0].start == 0 and made.segments[0].where == {}
    for segment, cue in zip(made.segments[1:], cues, strict=True):
        assert made.text[segment.start :].startswith(cue.text)
        assert segment.where == {"start_s": cue.start, "end_s": cue.end}
    bare = compose("Audio recording.", Transcript("Just words, no times."))
    assert bare.text == "Audio recording.\n\nJust words, no times." and bare.segments == []
    assert compose("Audio recording.", Transcript("")).text == "Audio recording."
