"""What a memory is distilled from, resolved: a stored citation, a passage
or a character range cited on the way (and so stored as a citation), or,
where a note's text is not kept, the passage itself with its summary.

Each source names the edge target its provenance points at: the passage
(``ID@P{N}``, keep's part id) when a passage is cited, else the note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound, PartNotFound, TextNotKept
from app.grounding import citations
from app.grounding.citations import CitationView, CiteInput
from app.kit.ids import PART_SUFFIX, InvalidId, normalize_id
from app.notes import repository as notes
from app.tenancy import Scope

SHAPES = "a source is a citation id, {note, part} or {note, start, end}"


@dataclass(frozen=True, slots=True)
class SourceInput:
    """One source as given: a citation id, or a note with a part or a range."""

    citation: str | None = None
    note: str | None = None
    part: int | None = None
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class Source:
    target: str  # what the provenance edge points at
    note: str
    part: int | None
    citation: CitationView | None
    summary: str | None = None  # the passage's summary, when there is no quote
    locator: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.citation.quote if self.citation is not None else (self.summary or "")


def target_of(note_id: str, part: int | None) -> str:
    return note_id if part is None else f"{note_id}@P{{{part}}}"


def split_target(target: str) -> tuple[str, int | None]:
    """(note id, part number) of an edge target (``doc@P{3}`` -> ("doc", 3))."""
    m = PART_SUFFIX.search(target)
    if m is None or m.start() == 0:
        return target, None
    return target[: m.start()], int(m.group(1))


def _note_id(raw: str) -> str:
    try:
        return normalize_id(raw)
    except InvalidId as exc:
        raise BadRequest(f"invalid note id: {exc}") from exc


async def resolve(
    session: AsyncSession, scope: Scope, given: Sequence[SourceInput]
) -> list[Source]:
    """Every source, in the order given, each once (the same citation, or the
    same uncited passage, named twice counts once)."""
    out: list[Source] = []
    seen: set[tuple[str, str | None]] = set()
    for raw in given:
        found = await _one(session, scope, raw)
        key = (found.target, found.citation.id if found.citation else None)
        if key not in seen:
            seen.add(key)
            out.append(found)
    return out


async def _one(session: AsyncSession, scope: Scope, given: SourceInput) -> Source:
    if given.citation is not None:
        return await _cited(session, scope, given.citation)
    if given.note is None:
        raise BadRequest(SHAPES)
    note_id = _note_id(given.note)
    if given.part is not None:
        if given.start is not None or given.end is not None:
            raise BadRequest(f"give a part or a start and end, not both ({SHAPES})")
        return await _passage(session, scope, note_id, given.part)
    if given.start is None or given.end is None:
        raise BadRequest(SHAPES)
    cited = await citations.create(
        session, scope, data=CiteInput(note=note_id, start=given.start, end=given.end)
    )
    return Source(note_id, note_id, None, cited, locator=cited.locator)


async def _cited(session: AsyncSession, scope: Scope, citation_id: str) -> Source:
    cited = await citations.get(session, scope, citation_id=citation_id)
    if await notes.get(session, scope, cited.note) is None:
        raise NoteNotFound(
            f"the note cited by {cited.id} ({cited.note}) was deleted: distil from what stands now"
        )
    return Source(
        target_of(cited.note, cited.part), cited.note, cited.part, cited, locator=cited.locator
    )


async def _passage(session: AsyncSession, scope: Scope, note_id: str, number: int) -> Source:
    """A passage: cited (and the citation stored) when its note's text is
    kept; else the part itself, with its summary and no quote."""
    if await notes.get(session, scope, note_id) is None:
        raise NoteNotFound(f"note not found: {note_id}")
    part = await notes.get_part(session, scope, note_id, number)
    if part is None:
        raise PartNotFound(f"part not found: {target_of(note_id, number)}")
    if part.span_start is not None and part.span_end is not None:
        try:
            cited = await citations.create(
                session, scope, data=CiteInput(note=note_id, part=number)
            )
        except TextNotKept:
            pass  # raised before anything is written: the part stands alone
        else:
            return Source(target_of(note_id, number), note_id, number, cited, locator=cited.locator)
    return Source(
        target_of(note_id, number),
        note_id,
        number,
        None,
        summary=part.summary,
        locator=dict(part.locator or {}),
    )
