"""What a find result says about itself, for state docs to branch on
(KEEP_PROTOCOL §4.3): ``margin`` (how far the best hit stands above the
next, relative to it: 1 alone, 0 tied), ``entropy`` (how evenly the scores
spread: 0 one clear answer, 1 all alike), ``lineage_strong`` (the share of
hits from the most common parent note, by ``_base_id``), its tags, and the
tag values most hits share (``top_facet_tags``, seen at least twice)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

LINEAGE_TAGS = ("_base_id", "_version_of")
FACETS = 3


def margin(scores: Sequence[float]) -> float:
    if len(scores) < 2:
        return 1.0 if scores else 0.0
    first, second = sorted(scores, reverse=True)[:2]
    return max(0.0, min(1.0, (first - second) / max(abs(first), 1e-9)))


def entropy(scores: Sequence[float]) -> float:
    if len(scores) < 2:
        return 0.0
    weights = [max(s, 0.0) for s in scores]
    total = sum(weights)
    if total <= 0:
        return 1.0
    spread = -sum(w / total * math.log(w / total) for w in weights if w > 0)
    return max(0.0, min(1.0, spread / math.log(len(weights))))


def _values(raw: Any) -> list[str]:
    items = raw if isinstance(raw, list) else [raw]
    return [str(v).strip() for v in items if isinstance(v, str | int | float) and str(v).strip()]


def lineage(results: Sequence[dict[str, Any]]) -> tuple[float, dict[str, Any] | None]:
    roots: Counter[str] = Counter()
    first_tags: dict[str, dict[str, Any]] = {}
    for r in results:
        tags = r.get("tags") if isinstance(r, dict) else None
        if not isinstance(tags, dict):
            continue
        roots_named = (str(tags.get(k) or "").strip() for k in LINEAGE_TAGS)
        root = next((r for r in roots_named if r), None)
        if root:
            roots[root] += 1
            first_tags.setdefault(root, dict(tags))
    if not roots:
        return 0.0, None
    root, count = roots.most_common(1)[0]
    return round(count / sum(roots.values()), 4), first_tags[root]


def facets(results: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    pairs: Counter[tuple[str, str]] = Counter()
    for r in results:
        tags = r.get("tags") if isinstance(r, dict) else None
        for key, raw in (tags or {}).items():
            if key and not key.startswith("_"):
                pairs.update((key, v) for v in _values(raw)[:4])
    shared = sorted(((p, n) for p, n in pairs.items() if n >= 2), key=lambda x: (-x[1], x[0]))
    return [{k: v} for (k, v), _ in shared[:FACETS]]


def enrich(output: dict[str, Any]) -> dict[str, Any]:
    """A find action's output with the signals added."""
    results = output.get("results")
    if not isinstance(results, list):
        return output
    scores = [
        float(r["score"])
        for r in results
        if isinstance(r, dict) and isinstance(r.get("score"), int | float)
    ]
    strong, dominant = lineage(results)
    return {
        **output,
        "margin": margin(scores) if scores else None,
        "entropy": entropy(scores) if scores else None,
        "lineage_strong": strong,
        "dominant_lineage_tags": dominant,
        "top_facet_tags": facets(results),
    }
