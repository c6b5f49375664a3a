"""The transcription protocol (speech to text with times) and its registry.

Optional: without a provider (``KEEPMEM_TRANSCRIPTION_PROVIDER=none``, the
default) an audio file is stored as its metadata line only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from app.providers.registry import Registry


@dataclass(frozen=True, slots=True)
class Cue:
    """One stretch of speech: seconds from the start of the recording."""

    start: float
    end: float
    text: str


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str  # the whole transcript as the provider gave it
    cues: list[Cue] = field(default_factory=list)  # empty when the provider gave no times
    language: str = ""


@runtime_checkable
class Transcriber(Protocol):
    name: str

    async def transcribe(self, audio: bytes, *, filename: str, media_type: str) -> Transcript:
        """What is said in ``audio``; PermanentError when retrying cannot help
        (the provider refused the file or the key), TransientError otherwise."""
        ...

    async def aclose(self) -> None: ...


registry: Registry[Transcriber] = Registry("transcription")
registry.register("openai", "app.providers.transcription.openai:OpenAITranscriber", "httpx")
