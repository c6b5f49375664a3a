"""A project's profile: what an agent reads before it plans queries (keep's
``stats`` action, which keep's ``stats`` flow state calls).

The shape is keep's, so keep's flows and prompts read it unchanged:

- ``total``: the user notes (ids not starting with ``.``; the seeded schema
  docs are not memory, and counting them would make every coverage figure
  depend on how many docs keep ships).
- ``tags``: the ``top_k`` most held user tag keys, each with how many notes
  hold it, its distinct values, the values only one note holds, the share of
  notes holding it, whether it looks categorical (few values, each held by
  several notes), whether it is an edge tag, and its ``top_k`` most held
  values; an edge tag also says how many targets a note names (fan-out) and
  how many notes name a target (fan-in). ``all_tags`` names every key.
- ``dates``: per date, the first and last day and the ``top_k`` busiest
  years, months and days (UTC).
- ``structure``: notes by source, the versions and parts histograms and tag
  edges by predicate, by inverse verb and by distinct ends.

The counting is the database's (``repository.profile``): a few statements
whatever the project's size. Ties between equal counts break by name (tag
values, sources) or newest first (periods), so the answer is stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest
from app.notes.repository import profile as repo
from app.tenancy import Scope

MAX_TOP_K = 1000
# keep's test for a categorical tag: at most this many values, each held by
# two notes or more on average
CATEGORICAL_MAX_VALUES = 20


async def profile(session: AsyncSession, scope: Scope, *, top_k: int = 10) -> dict[str, Any]:
    """The project's profile (the module docstring gives its shape); an empty
    project answers ``{"total": 0, "tags": {}, "dates": {}, "structure": {}}``."""
    if type(top_k) is not int or not 1 <= top_k <= MAX_TOP_K:
        raise BadRequest(f"top_k must be between 1 and {MAX_TOP_K}")
    total = await repo.count_user_notes(session, scope)
    if total == 0:
        return {"total": 0, "tags": {}, "dates": {}, "structure": {}}
    keys = await repo.tag_keys(session, scope, top_k=top_k)
    periods = await repo.busiest_periods(session, scope, top_k=top_k)
    counts = await repo.structure(session, scope)
    return {
        "total": total,
        "tags": {k.key: _tag_entry(k, total) for k in keys[:top_k]},
        "all_tags": [k.key for k in keys],
        "dates": _dates(periods),
        "structure": _structure(counts),
    }


def _average(total: int, count: int) -> float:
    return round(total / count, 1) if count else 0


def _tag_entry(k: repo.TagKeyCounts, total: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "count": k.notes,
        "distinct": k.distinct,
        "unique": k.unique,
        "coverage": round(k.notes / total, 3),
        "categorical": k.distinct <= CATEGORICAL_MAX_VALUES and k.distinct < k.notes * 0.5,
        "edge": k.edge,
        "top": dict(zip(k.top_values, k.top_counts, strict=True)),
    }
    if k.edge:
        entry["fan_out"] = {"avg": _average(k.fan_out_sum, k.notes), "max": k.fan_out_max}
        # each value held is one note naming that target: the values held
        # over all notes, spread over the distinct targets
        entry["fan_in"] = {"avg": _average(k.fan_out_sum, k.distinct), "max": k.fan_in_max}
    return entry


def _dates(periods: Sequence[tuple[str, str, str, int]]) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {
        column: {"min": None, "max": None, **{grain: {} for grain in repo.GRAINS}}
        for column in repo.DATE_COLUMNS
    }
    for column, grain, label, notes in periods:
        entry = out[column]
        if grain == "first":
            entry["min"] = label
        elif grain == "last":
            entry["max"] = label
        else:
            entry[grain][label] = notes
    return out


def _structure(counts: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    by_kind: dict[str, list[tuple[str, int]]] = {}
    for kind, key, n in counts:
        by_kind.setdefault(kind, []).append((key, n))

    def most_first(kind: str) -> dict[str, int]:
        return dict(sorted(by_kind.get(kind, []), key=lambda kn: (-kn[1], kn[0])))

    def histogram(kind: str) -> dict[str, int]:
        return dict(sorted(by_kind.get(kind, []), key=lambda kn: int(kn[0])))

    def single(kind: str) -> int:
        return sum(n for _, n in by_kind.get(kind, []))

    versions = histogram("versions")
    parts = histogram("parts")
    return {
        "sources": most_first("source"),
        "with_versions": sum(versions.values()),
        "versions_len": versions,
        "with_parts": sum(parts.values()),
        "parts_len": parts,
        "edges": {
            "forward": most_first("forward"),
            "inverse": most_first("inverse"),
            "distinct_sources": single("edge_sources"),
            "distinct_targets": single("edge_targets"),
        },
    }
