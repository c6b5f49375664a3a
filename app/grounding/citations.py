"""Citations: a span of a note's text quoted exactly, that can be checked.

A citation names the note, its version, the span (characters of the
note's normalised text), the exact quote with some context before and
after, the sha256 of the whole text, the source URI and page (slide, sheet,
cue times). Its id is made of what it cites (the note, the text's hash, the
span), so citing the same span of the same text twice gives one citation.

Citing and verifying need the note's text, which a project keeps only when
it asks (``keep_text``, ``app.notes.texts``); without it a citation cannot
be made (409 ``text_not_kept``) and verify answers ``unverifiable``.

Verify re-reads the note's kept text: ``valid`` when its hash is the one
cited; ``changed`` when it differs (the diagnosis says whether the quote
is still at its span, moved, or gone from the text); ``gone`` when the
note was deleted.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, CitationNotFound, NoteNotFound, PartNotFound, TextNotKept
from app.grounding import repository as repo
from app.kit import spans
from app.kit.ids import InvalidId, normalize_id
from app.kit.timeutil import keep_ts
from app.models import Citation
from app.notes import repository as notes
from app.notes import texts
from app.notes.texts import KeptText
from app.tenancy import Scope

MAX_QUOTE_CHARS = 10_000
DEFAULT_CONTEXT = 200
MAX_CONTEXT = 2_000
MAX_LIST = 200


@dataclass(frozen=True, slots=True)
class CiteInput:
    note: str
    part: int | None = None
    start: int | None = None
    end: int | None = None
    quote: str | None = None  # check the span against it, or find the span by it
    context_chars: int = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class CitationView:
    id: str
    note: str
    version: int
    part: int | None
    start: int
    end: int
    quote: str
    before: str
    after: str
    text_sha256: str
    source_uri: str | None
    locator: dict[str, Any]
    created_at: str | None  # None: not stored (made for a find's result)
    stored: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str  # valid | changed | gone | unverifiable
    diagnosis: str
    citation: CitationView
    current_sha256: str | None = None
    current_version: int | None = None
    found_at: tuple[int, int] | None = None  # where the quote is in the current text
    quote_in_place: bool = False


def citation_id(note_id: str, text_sha256: str, start: int, end: int) -> str:
    raw = f"{note_id}\x00{text_sha256}\x00{start}\x00{end}".encode()
    return "cit_" + hashlib.sha256(raw).hexdigest()[:20]


def _note_id(raw: str) -> str:
    try:
        return normalize_id(raw)
    except InvalidId as exc:
        raise BadRequest(f"invalid note id: {exc}") from exc


def _span(kept: KeptText, data: CiteInput, part_span: tuple[int, int] | None) -> tuple[int, int]:
    """The span cited, checked against the text (and the quote when given)."""
    text = kept.text
    if part_span is not None:
        if data.start is not None or data.end is not None:
            raise BadRequest("give a part or a start and end, not both")
        start, end = part_span
    elif data.start is not None or data.end is not None:
        if data.start is None or data.end is None:
            raise BadRequest("a character range needs both start and end")
        start, end = data.start, data.end
        if not 0 <= start < end <= len(text):
            raise BadRequest(
                f"span {start}..{end} is outside the note's text (0..{len(text)} characters)"
            )
    elif data.quote:
        start = text.find(data.quote)
        if start < 0:
            raise BadRequest("the quote does not occur in the note's text")
        end = start + len(data.quote)
    else:
        raise BadRequest("cite a part, a character range (start, end) or a quote")
    if end - start > MAX_QUOTE_CHARS:
        raise BadRequest(f"a quote is at most {MAX_QUOTE_CHARS} characters, not {end - start}")
    if data.quote is not None and text[start:end] != data.quote:
        raise BadRequest(
            f"the quote does not match the note's text at {start}..{end}: "
            f"it reads {text[start:end][:200]!r}"
        )
    return start, end


async def _version(session: AsyncSession, scope: Scope, note_id: str) -> int:
    """The note's current version in keep's numbering (the oldest is 1)."""
    return await notes.max_version(session, scope, note_id) + 1


def _view(
    note_id: str,
    version: int,
    part: int | None,
    kept: KeptText,
    start: int,
    end: int,
    context: int,
    source_uri: str | None,
) -> CitationView:
    text = kept.text
    return CitationView(
        id=citation_id(note_id, kept.sha256, start, end),
        note=note_id,
        version=version,
        part=part,
        start=start,
        end=end,
        quote=text[start:end],
        before=text[max(0, start - context) : start],
        after=text[end : end + context],
        text_sha256=kept.sha256,
        source_uri=source_uri,
        locator=spans.locator(kept.segments, start, end),
        created_at=None,
        stored=False,
    )


async def create(session: AsyncSession, scope: Scope, *, data: CiteInput) -> CitationView:
    """Cite a part or a character range of a note (stored; the same span of
    the same text again returns the citation already stored)."""
    if not 0 <= data.context_chars <= MAX_CONTEXT:
        raise BadRequest(f"context_chars must be between 0 and {MAX_CONTEXT}")
    note_id = _note_id(data.note)
    note = await notes.get(session, scope, note_id)
    if note is None:
        raise NoteNotFound(f"note not found: {data.note}")
    part_span = None
    if data.part is not None:
        part = await notes.get_part(session, scope, note_id, data.part)
        if part is None:
            raise PartNotFound(f"part not found: {note_id}@P{{{data.part}}}")
        if part.span_start is None or part.span_end is None:
            raise BadRequest(
                "this part has no span (parts made by analyze are summaries, not passages): "
                "cite a character range instead"
            )
        part_span = (part.span_start, part.span_end)
    kept = await texts.read(session, scope, note_id)
    if kept is None:
        raise TextNotKept(texts.NOT_KEPT)
    start, end = _span(kept, data, part_span)
    view = _view(
        note_id,
        await _version(session, scope, note_id),
        data.part,
        kept,
        start,
        end,
        data.context_chars,
        note.tags.get("_source_uri"),
    )
    row = await repo.add(session, scope, _values(view))
    return of_row(row)


def _values(view: CitationView) -> dict[str, Any]:
    return {
        "id": view.id,
        "note_id": view.note,
        "version": view.version,
        "part_num": view.part,
        "span_start": view.start,
        "span_end": view.end,
        "quote": view.quote,
        "before": view.before,
        "after": view.after,
        "text_sha256": view.text_sha256,
        "source_uri": view.source_uri,
        "locator": view.locator,
    }


def of_row(row: Citation) -> CitationView:
    return CitationView(
        id=row.id,
        note=row.note_id,
        version=row.version,
        part=row.part_num,
        start=row.span_start,
        end=row.span_end,
        quote=row.quote,
        before=row.before,
        after=row.after,
        text_sha256=row.text_sha256,
        source_uri=row.source_uri,
        locator=dict(row.locator or {}),
        created_at=keep_ts(row.created_at),
    )


async def get(session: AsyncSession, scope: Scope, *, citation_id: str) -> CitationView:
    row = await repo.get(session, scope, citation_id)
    if row is None:
        raise CitationNotFound(f"citation not found: {citation_id}")
    return of_row(row)


def _cursor(row: Citation) -> str:
    raw = json.dumps([row.created_at.isoformat(), row.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(cursor: str | None) -> tuple[datetime, str] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, last = json.loads(raw)
        return datetime.fromisoformat(at), str(last)
    except (ValueError, TypeError) as exc:
        raise BadRequest("invalid cursor") from exc


async def list_citations(
    session: AsyncSession, scope: Scope, *, note: str | None, limit: int, cursor: str | None
) -> tuple[list[CitationView], str | None]:
    """The project's citations (of one note when given), newest first."""
    if not 1 <= limit <= MAX_LIST:
        raise BadRequest(f"limit must be between 1 and {MAX_LIST}")
    note_id = _note_id(note) if note else None
    rows = await repo.page(session, scope, note_id=note_id, limit=limit + 1, before=_after(cursor))
    more = len(rows) > limit
    rows = rows[:limit]
    return [of_row(r) for r in rows], (_cursor(rows[-1]) if more and rows else None)


async def delete(session: AsyncSession, scope: Scope, *, citation_id: str) -> None:
    if not await repo.remove(session, scope, citation_id):
        raise CitationNotFound(f"citation not found: {citation_id}")


# -- verify -----------------------------------------------------------------------------


def _nearest(text: str, quote: str, around: int) -> tuple[int, int] | None:
    """Where ``quote`` occurs in ``text``, the occurrence nearest ``around``."""
    best: int | None = None
    at = text.find(quote)
    while at >= 0:
        if best is None or abs(at - around) < abs(best - around):
            best = at
        at = text.find(quote, at + 1)
    return None if best is None else (best, best + len(quote))


async def verify_view(session: AsyncSession, scope: Scope, citation: CitationView) -> Verdict:
    """Check a citation against the note as it is now."""
    note = await notes.get(session, scope, citation.note)
    if note is None:
        return Verdict("gone", "the note was deleted", citation)
    kept = await texts.read(session, scope, citation.note)
    version = await _version(session, scope, citation.note)
    if kept is None:
        return Verdict("unverifiable", texts.NOT_KEPT, citation, current_version=version)
    text, start, end = kept.text, citation.start, citation.end
    in_place = text[start:end] == citation.quote
    if kept.sha256 == citation.text_sha256 and in_place:
        return Verdict(
            "valid",
            "the note's text is the one cited (same sha256) and the quote is at its span",
            citation,
            current_sha256=kept.sha256,
            current_version=version,
            found_at=(start, end),
            quote_in_place=True,
        )
    if in_place:
        why = "the note's text changed elsewhere; the quote is still at its span"
        found: tuple[int, int] | None = (start, end)
    else:
        found = _nearest(text, citation.quote, start)
        if found is not None:
            why = f"the note's text changed; the quote moved to {found[0]}..{found[1]}"
        else:
            now = text[start:end]
            why = "the note's text changed and the quote is no longer in it" + (
                f"; at its span it now reads {now[:200]!r}" if now else ""
            )
    return Verdict(
        "changed",
        why,
        citation,
        current_sha256=kept.sha256,
        current_version=version,
        found_at=found,
        quote_in_place=in_place,
    )


async def verify_given(session: AsyncSession, scope: Scope, *, citation: CitationView) -> Verdict:
    """Verify a citation as a client holds it (one a find returned)."""
    if citation.end <= citation.start:
        raise BadRequest("a citation's end must be after its start")
    note_id = _note_id(citation.note)
    return await verify_view(session, scope, dataclasses.replace(citation, note=note_id))


async def verify(session: AsyncSession, scope: Scope, *, citation_id: str) -> Verdict:
    return await verify_view(session, scope, await get(session, scope, citation_id=citation_id))


# -- find with citations -----------------------------------------------------------------


async def for_hits(
    session: AsyncSession,
    scope: Scope,
    hits: Sequence[tuple[str, str, int, tuple[int, int] | None]],
    *,
    context: int = DEFAULT_CONTEXT,
) -> tuple[list[CitationView | None], str | None]:
    """A citation (not stored) for each find result: (note id, kind, part or
    version number, passage span). A passage cites its span; a whole note
    cites its text when that is at most MAX_QUOTE_CHARS; an earlier version
    (its text is not kept) and analyze's parts (no span) cite nothing. None
    where the text is not kept (the second value then says why)."""
    kept: dict[str, KeptText | None] = {}
    versions: dict[str, int] = {}
    sources: dict[str, str | None] = {}
    found = await notes.get_many(session, scope, list({h[0] for h in hits}))
    out: list[CitationView | None] = []
    missing = False
    for note_id, kind, ref, span in hits:
        part = ref if kind == "part" else None
        if kind == "version":
            out.append(None)
            continue
        if note_id not in kept:
            kept[note_id] = await texts.read(session, scope, note_id)
            versions[note_id] = await _version(session, scope, note_id)
            note = found.get(note_id)
            sources[note_id] = note.tags.get("_source_uri") if note is not None else None
        text = kept[note_id]
        if text is None:
            missing = True
            out.append(None)
            continue
        if span is None:
            if part is not None or len(text.text) > MAX_QUOTE_CHARS:
                out.append(None)
                continue
            span = (0, len(text.text))
        start, end = span
        out.append(
            _view(note_id, versions[note_id], part, text, start, end, context, sources[note_id])
        )
    return out, (texts.NOT_KEPT if missing else None)


# -- open ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Opened:
    citation: CitationView
    text: str  # a window of the current text around the span
    start: int  # the quote's span in ``text``
    end: int
    verdict: Verdict
    notes: list[str] = field(default_factory=list)


async def open_citation(
    session: AsyncSession, scope: Scope, *, citation_id: str, window: int = 1_000
) -> Opened:
    """The cited text with the span marked: the note's current text around
    where the quote is now (or the stored quote and context when the text is
    not kept, or has changed and no longer holds it)."""
    verdict = await verify(session, scope, citation_id=citation_id)
    c = verdict.citation
    kept = None
    if verdict.status in ("valid", "changed") and verdict.found_at is not None:
        kept = await texts.read(session, scope, c.note)
    if kept is not None and verdict.found_at is not None:
        s, e = verdict.found_at
        lo, hi = max(0, s - window), min(len(kept.text), e + window)
        return Opened(c, kept.text[lo:hi], s - lo, e - lo, verdict)
    stored = c.before + c.quote + c.after
    start = len(c.before)
    return Opened(
        c,
        stored,
        start,
        start + len(c.quote),
        verdict,
        notes=[f"shown as cited ({verdict.status}): {verdict.diagnosis}"],
    )
