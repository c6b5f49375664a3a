"""Reading provenance: what a note was derived from (its ``derived_from``
edges, each with the passage's summary and span and the citations that
quote it) and, the other way, what was derived from a note or its passages.

Row-level security decides what a tag-scoped key sees: an edge is visible
only when the notes at both of its ends are (a part's end is its note), so
a key that cannot see a source document sees no edge to it, and no
citation of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.distill.service import CITATIONS_TAG
from app.distill.sources import split_target, target_of
from app.errors import BadRequest, NoteNotFound
from app.grounding import citations
from app.grounding import repository as cited
from app.grounding.citations import CitationView
from app.kit.ids import InvalidId, normalize_id
from app.kit.tags import InvalidTags, values_of
from app.kit.timeutil import keep_ts
from app.notes import edges
from app.notes import repository as notes
from app.tenancy import Scope

SUMMARY_CHARS = 300
MAX_DERIVED = 1000


@dataclass(frozen=True, slots=True)
class Origin:
    """One ``derived_from`` edge of a note."""

    target: str
    note: str
    part: int | None
    exists: bool
    summary: str
    span: tuple[int, int] | None = None
    locator: dict[str, Any] = field(default_factory=dict)
    citations: list[CitationView] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Derived:
    """A note derived from the one asked about, and which of its passages."""

    id: str
    summary: str
    updated_at: str
    targets: list[str]


def _note_id(raw: str) -> str:
    try:
        return normalize_id(raw)
    except InvalidId as exc:
        raise BadRequest(f"invalid id: {exc}") from exc


def _cut(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS].rstrip() + "..."


async def _citations_of(
    session: AsyncSession, scope: Scope, tags: dict[str, Any]
) -> dict[str, list[CitationView]]:
    """The citations a note's ``citations`` tag names, by the target they cite."""
    try:
        ids = values_of(tags.get(CITATIONS_TAG), CITATIONS_TAG) if CITATIONS_TAG in tags else []
    except InvalidTags:
        ids = []
    rows = await cited.get_many(session, scope, ids)
    out: dict[str, list[CitationView]] = {}
    for citation_id in ids:
        row = rows.get(citation_id)
        if row is not None:
            out.setdefault(target_of(row.note_id, row.part_num), []).append(citations.of_row(row))
    return out


async def _origin(
    session: AsyncSession, scope: Scope, target: str, quoted: list[CitationView]
) -> Origin:
    base, number = split_target(target)
    if number is not None:
        part = await notes.get_part(session, scope, base, number)
        if part is not None:
            span = None
            if part.span_start is not None and part.span_end is not None:
                span = (part.span_start, part.span_end)
            return Origin(
                target, base, number, True, part.summary, span, dict(part.locator or {}), quoted
            )
        if await notes.get(session, scope, target) is None:
            return Origin(target, base, number, False, "", citations=quoted)
        base, number = target, None  # a note whose id only looks like a part's
    note = await notes.get(session, scope, base)
    summary = _cut(note.summary) if note is not None else ""
    return Origin(target, base, number, note is not None, summary, citations=quoted)


async def provenance(
    session: AsyncSession, scope: Scope, *, raw_id: str
) -> tuple[str, list[Origin]]:
    """The note's ``derived_from`` edges, in target order, each with the
    passage (or note) it points at and the note's citations of it. A target
    deleted since is listed with ``exists`` false. Returns (the note's id, them)."""
    note_id = _note_id(raw_id)
    note = await notes.get(session, scope, note_id)
    if note is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    targets = await edges.provenance_of(session, scope, note_id=note_id)
    by_target = await _citations_of(session, scope, note.tags)
    return note_id, [await _origin(session, scope, t, by_target.get(t, [])) for t in targets]


async def derived(
    session: AsyncSession, scope: Scope, *, raw_id: str, limit: int
) -> tuple[str, list[Derived]]:
    """The notes derived from a note or any of its passages (or from one
    passage, given as ``ID@P{N}``), newest first: (the id asked about, them)."""
    if not 1 <= limit <= MAX_DERIVED:
        raise BadRequest(f"limit must be between 1 and {MAX_DERIVED}")
    note_id = _note_id(raw_id)
    whole = True
    if await notes.get(session, scope, note_id) is None:
        base, number = split_target(note_id)
        found = None
        if number is not None and await notes.get(session, scope, base) is not None:
            found = await notes.get_part(session, scope, base, number)
        if found is None:
            raise NoteNotFound(f"note not found: {raw_id}")
        note_id, whole = target_of(base, number), False
    # Each source has at most a few edges into one document: read enough rows
    # for ``limit`` sources.
    rows = await edges.derived_into(
        session, scope, note_id=note_id, parts=whole, limit=min(limit * 50, 50_000)
    )
    grouped: dict[str, Derived] = {}
    for source_id, target, summary, updated in rows:
        entry = grouped.get(source_id)
        if entry is None:
            if len(grouped) == limit:
                continue
            entry = grouped[source_id] = Derived(source_id, _cut(summary), keep_ts(updated), [])
        entry.targets.append(target)
    return note_id, list(grouped.values())
