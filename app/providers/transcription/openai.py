"""OpenAI-compatible speech to text (``POST {base}/audio/transcriptions``):
OpenAI's whisper-1, or any server speaking the same wire format (a local
whisper server, vLLM, a gateway). The file goes up as multipart form data;
``verbose_json`` with segment timestamps brings the times back, so each
passage of a transcript can say when it was said."""

from __future__ import annotations

import math
from typing import Any

from app.providers.errors import PermanentError
from app.providers.http import HostedModel, post_form
from app.providers.transcription.base import Cue, Transcript


class OpenAITranscriber(HostedModel):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    def __init__(self, *, timeout: float = 600.0, **options: Any) -> None:
        # A long recording takes the provider minutes; the job's lease is
        # kept by the worker's heartbeat meanwhile.
        super().__init__(timeout=timeout, **options)

    async def transcribe(self, audio: bytes, *, filename: str, media_type: str) -> Transcript:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = await post_form(
            self._client,
            f"{self.base_url}/audio/transcriptions",
            data={
                "model": self.model,
                "response_format": "verbose_json",
                "timestamp_granularities[]": "segment",
            },
            files={"file": (filename or "audio", audio, media_type or "application/octet-stream")},
            headers=headers,
            vendor=self.vendor,
        )
        text = body.get("text")
        if not isinstance(text, str):
            raise PermanentError(f"{self.vendor}: unexpected transcription reply {body!r:.200}")
        language = body.get("language")
        return Transcript(
            text=text.strip(),
            cues=_cues(body.get("segments")),
            language=language if isinstance(language, str) else "",
        )


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _cues(raw: Any) -> list[Cue]:
    """The reply's segments with usable times and text, in order; anything
    malformed is left out (the text is kept whole in ``Transcript.text``)."""
    out: list[Cue] = []
    if not isinstance(raw, list):
        return out
    for item in raw:
        if not isinstance(item, dict):
            continue
        start, end, words = _seconds(item.get("start")), _seconds(item.get("end")), item.get("text")
        if start is None or end is None or not isinstance(words, str) or not words.strip():
            continue
        out.append(Cue(start=start, end=max(end, start), text=" ".join(words.split())))
    out.sort(key=lambda c: c.start)
    return out
