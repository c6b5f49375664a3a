"""A long note's passages: where their text comes from, how they are cut,
what each one's summary says, and re-cutting a project's notes.

The chunk job reads the note's held content (a put holds it until its
background work is done) or, once that is let go, the text its project kept
(``app.notes.texts``); with neither there is nothing to cut, and the job
says how to get it back. Passages become the note's parts (``ID@P{N}``)
through the notes domain, each with its span, locator, vector and full text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.grounding import chunking
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import spans
from app.kit.spans import Segment
from app.models import Note
from app.notes import texts
from app.settings import Settings
from app.tenancy import Scope

SUMMARY_CHARS = 200
RECHUNK_BATCH = 200
NOTHING_TO_CUT = (
    "the note's content is no longer held and its project does not keep text: "
    "put the document again, or turn keep_text on first (PATCH /v1/settings)"
)


@dataclass(frozen=True, slots=True)
class Source:
    text: str
    segments: list[Segment] = field(default_factory=list)
    kept: bool = False  # read from the kept text (not the held content)


async def source(
    session: AsyncSession, scope: Scope, note: Note, payload: dict[str, Any]
) -> Source | None:
    """The text to cut: held content (with the segments the put sent), else
    the kept text (with its own); None when neither is there."""
    if note.pending_content is not None:
        segments = spans.from_json(payload.get("segments"))
        if not segments:  # a re-cut: the segments kept with the same text, if any
            kept = await texts.read(session, scope, note.id)
            if kept is not None and kept.sha256 == texts.sha256(note.pending_content):
                segments = kept.segments
        return Source(note.pending_content, segments)
    kept = await texts.read(session, scope, note.id)
    if kept is None:
        return None
    return Source(kept.text, kept.segments, kept=True)


def summary_of(text: str, limit: int = SUMMARY_CHARS) -> str:
    """A passage's summary: its opening words (offline and instant; the
    passage itself is what find searches)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0]
    return f"{cut}..."


def cut(text: str, segments: Sequence[Segment], settings: Settings) -> list[chunking.Passage]:
    """The passages of a text; [] when the model sees it whole (a note of at
    most 254 tokens: its own vector covers it, so it stays whole)."""
    # At the model's own window the cut itself says whether the text fits;
    # a smaller passage size must not cut a text the model sees whole.
    if settings.passage_tokens < chunking.WINDOW and not chunking.is_long(text, chunking.WINDOW):
        return []
    found = chunking.passages(
        text, segments, size=settings.passage_tokens, overlap=settings.passage_overlap
    )
    return found if len(found) > 1 else []


@dataclass(frozen=True, slots=True)
class Rechunked:
    queued: int
    without_text: int  # long notes whose text is neither held nor kept
    next_after: str | None  # the next batch starts after this id


async def rechunk(
    session: AsyncSession,
    scope: Scope,
    *,
    min_chars: int,
    after: str = "",
    limit: int = RECHUNK_BATCH,
) -> Rechunked:
    """Queue chunk jobs for a batch of the project's notes (in id order after
    ``after``) that have kept or held text longer than the chunking
    threshold, through the pipeline (nothing is cut in the request)."""
    rows = await texts.long_notes(session, scope, min_chars=min_chars, after=after, limit=limit)
    queued = without = 0
    for note_id, content_hash, held, kept in rows:
        if not (held or kept):
            without += 1
            continue
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.CHUNK,
            note_id=note_id,
            payload={"content_hash": content_hash, "segments": []},
            priority=jobs.BACKGROUND_PRIORITY,
        )
        queued += 1
    next_after = rows[-1][0] if len(rows) == limit else None
    return Rechunked(queued=queued, without_text=without, next_after=next_after)
