"""How a page of results is spread over documents: a long document's
passage stands in for the document itself when both are found, and a page
may hold at most so many results of one document (``per_document``)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncSession

from app.notes import repository as notes
from app.request_vars import timed
from app.search import ranking
from app.search.ranking import Candidate, Key
from app.tenancy import Scope


async def passages_found(
    session: AsyncSession, scope: Scope, found: Mapping[Key, Candidate]
) -> set[Key]:
    """The candidate parts that are passages of a candidate note (one
    statement, only when a note and one of its parts were both found)."""
    notes_found = {k[0] for k in found if k[1] == "note"}
    refs = [(k[0], k[2]) for k in found if k[1] == "part" and k[0] in notes_found]
    if not refs:
        return set()
    with timed("passages"):
        held = await notes.passages_among(session, scope, refs)
    return {(note_id, "part", num) for note_id, num in held}


def passages_stand_for_notes(
    scored: list[tuple[Key, float]],
    explained: dict[Key, ranking.Explained] | None,
    passages: set[Key] | frozenset[Key],
) -> list[tuple[Key, float]]:
    """A note found together with one of its parts is shown as its best part,
    at the better of the two places: a long document's own hit (its first
    window's vector, its first characters' words) says less than the passage
    that answers, and the two would take two places of the page. A part
    shown in its note's place carries the note's score, and with explain the
    note's explanation (the one that score came from). Only passages (parts
    the chunk job cut, with spans) stand in: keep's analyze parts are
    summaries, shown beside their note as keep shows them."""
    best: dict[str, Key] = {}
    for key, _ in scored:
        if key in passages:
            best.setdefault(key[0], key)
    out: list[tuple[Key, float]] = []
    placed: set[Key] = set()
    for key, score in scored:
        shown = best[key[0]] if key[1] == "note" and key[0] in best else key
        if shown in placed:
            continue
        if shown != key and explained is not None and key in explained:
            explained[shown] = explained[key]
        placed.add(shown)
        out.append((shown, score))
    return out


def per_document(scored: list[tuple[Key, float]], cap: int) -> list[tuple[Key, float]]:
    """At most ``cap`` results of one note (counting its parts and versions),
    in order: the page goes on with other documents' best hits."""
    seen: dict[str, int] = {}
    out = []
    for key, score in scored:
        n = seen.get(key[0], 0)
        if n < cap:
            out.append((key, score))
            seen[key[0]] = n + 1
    return out
