"""The "where you left off" block a hook hands the next session.

Precomputed by the worker after each digest, per (project, cwd) and for the
project as a whole, so the read a hook waits on is one row. Candidate
lines (the newest checkpoint, open tasks, recurring patterns, relevant
memories) are scored, best first within a section, and packed under the
project's character budget (default 6,000; hosts cut what passes 10,000):
what does not fit is left out whole, never cut mid-line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.kit.timeutil import utcnow

HALF_LIFE_DAYS = 7.0
SHOWN_KINDS = ("error", "fix", "decision", "preference")
# Sections in the order an agent reads them; lines are ranked within each.
SECTIONS = ("checkpoint", "tasks", "patterns", "memories")
TITLES = {
    "checkpoint": "## Last checkpoint",
    "tasks": "## Open tasks",
    "patterns": "## Recurring in this project",
    "memories": "## Related memories",
}


@dataclass(frozen=True, slots=True)
class Line:
    section: str
    text: str
    score: float


def _decay(when: datetime | None, now: datetime) -> float:
    if when is None:
        return 0.5
    days = max((now - when).total_seconds() / 86400, 0.0)
    return math.pow(0.5, days / HALF_LIFE_DAYS)


def checkpoint_lines(cp: dict[str, Any] | None) -> list[Line]:
    if not cp:
        return []
    head = (
        f"Session {cp.get('session_id')} ({cp.get('platform')}, {cp.get('trigger')}, "
        f"{str(cp.get('at', ''))[:16]}):"
    )
    out = [Line("checkpoint", head, 10.0)]
    summary = " ".join(str(cp.get("summary") or "").split())
    if summary:
        out.append(Line("checkpoint", summary[:1500], 9.0))
    out += [
        Line("checkpoint", f"Decision: {d}", 8.0 - i * 0.01)
        for i, d in enumerate(cp.get("decisions") or [])
    ]
    if cp.get("files"):
        out.append(Line("checkpoint", "Files: " + ", ".join(cp["files"][-10:]), 5.0))
    return out


def task_lines(tasks: Sequence[tuple[str, datetime]], now: datetime) -> list[Line]:
    return [Line("tasks", f"- {text}", 5.0 * _decay(at, now)) for text, at in tasks]


def pattern_lines(patterns: Sequence[Any], now: datetime) -> list[Line]:
    out = []
    for p in patterns:
        if p.kind not in SHOWN_KINDS:
            continue
        sessions = len(p.sessions)
        # Decisions and preferences are phrase hits: candidates until a
        # second session says the same (the checkpoint carries the host's own).
        if p.kind in ("decision", "preference") and sessions < 2:
            continue
        where = f" (files: {', '.join(p.files[:3])})" if p.files else ""
        label = {"error": "Error", "fix": "Fixed", "decision": "Decision"}.get(p.kind, "Preference")
        text = f"- {label} x{p.count} in {sessions} session(s): {p.template[:300]}{where}"
        score = math.log1p(p.count) * (1 + sessions) * _decay(p.last_seen, now)
        out.append(Line("patterns", text, score))
    return out


def memory_lines(memories: Sequence[tuple[str, str, float]]) -> list[Line]:
    return [
        Line("memories", f"- [{note_id}] {summary[:300]}", s) for note_id, summary, s in memories
    ]


def pack(lines: Sequence[Line], *, budget: int, title: str) -> str:
    """The block: sections in order, lines best first, whole lines only,
    at most ``budget`` characters ("" when there is nothing to say)."""
    if not lines:
        return ""
    ranked = sorted(lines, key=lambda x: -x.score)
    size = len(title) + 1
    chosen: dict[str, list[Line]] = {}
    for line in ranked:
        cost = len(line.text) + 1 + (0 if line.section in chosen else len(TITLES[line.section]) + 2)
        if size + cost > budget:
            continue
        chosen.setdefault(line.section, []).append(line)
        size += cost
    if not chosen:
        return ""
    parts = [title]
    for section in SECTIONS:
        if section in chosen:
            parts += ["", TITLES[section], *(x.text for x in chosen[section])]
    return "\n".join(parts)[:budget]


def block(
    *,
    project: str,
    cwd: str,
    checkpoint: dict[str, Any] | None,
    tasks: Sequence[tuple[str, datetime]],
    patterns: Sequence[Any],
    memories: Sequence[tuple[str, str, float]],
    budget: int,
) -> str:
    now = utcnow()
    lines = [
        *checkpoint_lines(checkpoint),
        *task_lines(tasks, now),
        *pattern_lines(patterns, now),
        *memory_lines(memories),
    ]
    where = f" in {cwd}" if cwd else ""
    title = f"# keepmem: where you left off (project {project}{where})"
    return pack(lines, budget=budget, title=title)
