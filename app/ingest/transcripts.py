"""An audio document's text when a transcriber is configured: the metadata
line its reader makes, a blank line, then one line per stretch of speech,
each a segment that knows when it was said (``start_s``, ``end_s``), so a
passage of the transcript cites its time in the recording."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.kit.spans import Segment
from app.providers.transcription.base import Transcriber, Transcript

# Providers tell a file's format by its name: the suffix for each audio type.
SUFFIXES = {
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/mp4": ".m4a",
    "audio/x-m4a": ".m4a",
    "audio/ogg": ".ogg",
    "audio/flac": ".flac",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "audio/webm": ".webm",
}


@dataclass(frozen=True, slots=True)
class Heard:
    text: str  # metadata line + transcript, as the note's content
    segments: list[Segment] = field(default_factory=list)
    cues: int = 0
    transcript_chars: int = 0


def compose(metadata: str, transcript: Transcript) -> Heard:
    """The note's text and its segments: offsets are into the text returned."""
    head = metadata.strip()
    lines = [c.text for c in transcript.cues] or ([transcript.text] if transcript.text else [])
    if not lines:
        return Heard(text=head)
    prefix = f"{head}\n\n" if head else ""
    segments = [Segment(0)] if prefix else []  # the metadata line has no time
    offset = len(prefix)
    for cue in transcript.cues:
        segments.append(
            Segment(offset, {"start_s": round(cue.start, 3), "end_s": round(cue.end, 3)})
        )
        offset += len(cue.text) + 1
    body = "\n".join(lines)
    return Heard(
        text=prefix + body,
        segments=segments if transcript.cues else [],
        cues=len(transcript.cues),
        transcript_chars=len(body),
    )


async def transcribed(
    transcriber: Transcriber, audio: bytes, *, metadata: str, filename: str, media_type: str
) -> Heard:
    """Transcribe ``audio`` and compose the note's text from it."""
    got = await transcriber.transcribe(
        audio, filename=named(filename, media_type), media_type=media_type
    )
    return compose(metadata, got)


def named(filename: str, media_type: str) -> str:
    """A file name whose suffix says the format (providers go by it)."""
    suffix = SUFFIXES.get(media_type)
    if suffix is None or filename.lower().endswith(suffix):
        return filename
    return f"{filename}{suffix}"
