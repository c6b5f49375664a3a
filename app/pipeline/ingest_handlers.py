"""Ingest's background work beyond one fetch: a batch of a same-site crawl
(``crawl``) and an uploaded audio file's transcript (``transcribe``). Thin:
the crawl's rules are ``app.ingest.crawl``'s, the transcript's shape is
``app.ingest.transcripts``'s; here they meet the job."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from app.ingest import crawl as crawling
from app.ingest import documents, transcripts
from app.notes import repository as notes
from app.pipeline.jobrun import JobRun
from app.pipeline.pipeline import Pipeline
from app.providers.errors import PermanentError
from app.providers.transcription.base import Transcriber


async def crawl(run: JobRun) -> None:
    """A batch of pages of a crawl; the next batch is queued, with the
    crawl's state, in the transaction that finishes this one."""
    batch = await crawling.crawl_batch(
        run.scope, run.job.payload, settings=run.pipeline.settings, transaction=run.transaction
    )
    async with run.transaction() as session:
        await run.finish(session, await crawling.queue_next(session, run.scope, batch))


def transcriber_of(p: Pipeline) -> Transcriber:
    found = p.transcriber()
    if found is None:
        raise PermanentError(
            "no transcription provider is configured on the worker (KEEPMEM_TRANSCRIPTION_PROVIDER)"
        )
    return found


async def transcribe(run: JobRun) -> None:
    """An upload's audio: its speech to text, stored under the metadata line
    with one segment (start_s, end_s) per stretch of speech, replacing the
    placeholder; the held file is let go."""
    p, payload = run.pipeline, run.job.payload
    transcriber = transcriber_of(p)
    async with run.transaction() as session:
        held = await documents.held_images(session, run.scope, job_id=run.job.id)
    if not held:
        raise PermanentError("the audio file is no longer held: upload it again")
    kind = str(payload.get("content_type") or "audio/mpeg")
    heard = await transcripts.transcribed(
        transcriber,
        held[0],
        metadata=str(payload.get("text") or ""),
        filename=str(payload.get("filename") or "audio"),
        media_type=kind,
    )
    delivered = documents.Delivered(
        text=heard.text,
        found_tags=dict(payload.get("tags") or {}),
        user_tags=payload.get("user_tags") or {},
        content_type=kind,
        segments=heard.segments,
    )
    result: dict[str, Any] = {
        "transcriber": transcriber.name,
        "segments": heard.cues,
        "chars": heard.transcript_chars,
    }
    async with run.transaction() as session:
        await documents.release_images(session, run.scope, job_id=run.job.id)
        if await notes.get(session, run.scope, run.note_id) is None:
            await run.finish(session, {"skipped": "note deleted"})
            return
        await documents.deliver(
            session, run.scope, note_id=run.note_id, doc=delivered, limits=p.settings.limits
        )
        await run.finish(session, result)


async def heard(
    p: Pipeline, data: bytes, doc: documents.Document, url: str
) -> transcripts.Heard | None:
    """A fetched audio file's text with its transcript, when a transcriber is
    configured (None otherwise: the metadata line stays the text)."""
    transcriber = p.transcriber() if doc.kind.startswith("audio/") else None
    if transcriber is None:
        return None
    name = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1] or "audio"
    return await transcripts.transcribed(
        transcriber, data, metadata=doc.text, filename=name, media_type=doc.kind
    )
