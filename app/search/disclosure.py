"""Progressive disclosure for agents: a compact result list, a timeline around
a note, and full detail by id, each trimmed to a token budget.

Tokens are estimated as characters / 4 (close for English with common
tokenizers); a budget trims whole entries, never cuts one in half, and the
response says when it trimmed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound
from app.kit.ids import InvalidId, normalize_id
from app.notes import repository as notes
from app.notes.views import ItemView, note_view, part_view
from app.providers.summarization.local import cut
from app.tenancy import Scope

LINE_CHARS = 160


def tokens(value: Any) -> int:
    return math.ceil(len(json.dumps(value, ensure_ascii=False)) / 4)


@dataclass(slots=True)
class Budgeted:
    entries: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    truncated: bool = False


def fit(entries: list[dict[str, Any]], budget: int | None, spent: int = 0) -> Budgeted:
    """Keep entries in order while they fit the budget (None = no budget)."""
    out = Budgeted(tokens=spent)
    for entry in entries:
        cost = tokens(entry)
        if budget is not None and out.tokens + cost > budget:
            out.truncated = True
            break
        out.entries.append(entry)
        out.tokens += cost
    return out


def line(view: ItemView, score: float | None = None) -> dict[str, Any]:
    """One result as a single line: id, score, one-line summary, date."""
    first = view.summary.strip().splitlines()[0] if view.summary.strip() else ""
    entry: dict[str, Any] = {
        "id": view.id,
        "summary": cut(first, LINE_CHARS),
        "date": view.updated_at[:10],
    }
    if score is not None:
        entry["score"] = score
    return entry


def _budget(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise BadRequest("token_budget must be >= 1")
    return value


async def timeline(
    session: AsyncSession,
    scope: Scope,
    *,
    raw_id: str,
    before: int,
    after: int,
    token_budget: int | None,
) -> dict[str, Any]:
    """What came before and after a note in time, among notes sharing its tags."""
    budget = _budget(token_budget)
    if not (0 <= before <= 100 and 0 <= after <= 100):
        raise BadRequest("before and after must be between 0 and 100")
    try:
        note_id = normalize_id(raw_id)
    except InvalidId as exc:
        raise BadRequest(f"invalid id: {exc}") from exc
    anchor = await notes.get(session, scope, note_id)
    if anchor is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    terms = [t for t in anchor.tag_index if "=" in t]
    earlier, later = await notes.neighbours_in_time(
        session,
        scope,
        anchor_id=note_id,
        anchor_time=anchor.updated_at,
        terms=terms,
        before=before,
        after=after,
    )
    center = line(note_view(anchor))
    spent = tokens(center)
    # Nearest in time first when trimming, on both sides alternately.
    ranked: list[tuple[str, dict[str, Any]]] = []
    for i in range(max(len(earlier), len(later))):
        if i < len(earlier):
            ranked.append(("before", line(note_view(earlier[-1 - i]))))
        if i < len(later):
            ranked.append(("after", line(note_view(later[i]))))
    kept = fit([e for _, e in ranked], budget, spent)
    kept_ids = {e["id"] for e in kept.entries}
    return {
        "note": center,
        "tags": sorted(terms),
        "before": [line(note_view(n)) for n in earlier if n.id in kept_ids],
        "after": [line(note_view(n)) for n in later if n.id in kept_ids],
        "tokens": kept.tokens,
        "truncated": kept.truncated,
    }


async def detail(
    session: AsyncSession, scope: Scope, *, raw_id: str, token_budget: int | None
) -> dict[str, Any]:
    """A note in full, then its parts and its history, within the budget."""
    budget = _budget(token_budget)
    try:
        note_id = normalize_id(raw_id)
    except InvalidId as exc:
        raise BadRequest(f"invalid id: {exc}") from exc
    note = await notes.get(session, scope, note_id)
    if note is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    view = note_view(note)
    head = {"id": view.id, "summary": view.summary, "tags": view.tags}
    spent = tokens(head)
    if budget is not None and spent > budget:
        # The note itself always comes back, cut to what the budget allows.
        room = max(budget * 4 - (spent * 4 - len(view.summary)), 40)
        head["summary"] = cut(view.summary, room)
        return {
            "note": head,
            "parts": [],
            "versions": [],
            "tokens": tokens(head),
            "truncated": True,
        }
    parts = [line(part_view(note_id, p)) for p in await notes.list_parts(session, scope, note_id)]
    history = [
        {
            "id": f"{note_id}@V{{{i + 1}}}",
            "summary": cut(v.summary, LINE_CHARS),
            "date": v.updated_at.date().isoformat(),
        }
        for i, v in enumerate(await notes.list_versions(session, scope, note_id, limit=100))
    ]
    kept = fit(parts + history, budget, spent)
    kept_parts = [e for e in kept.entries if "@P{" in e["id"]]
    kept_history = [e for e in kept.entries if "@V{" in e["id"]]
    return {
        "note": head,
        "parts": kept_parts,
        "versions": kept_history,
        "tokens": kept.tokens,
        "truncated": kept.truncated,
    }
