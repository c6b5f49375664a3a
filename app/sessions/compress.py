"""Compressing a session's events with a model (optional; off by default).

The digest hands a batch of one session's cleaned events to a model, which
answers with a title, facts, a narrative, concepts and files as JSON. Each
project has a token budget per UTC day: a call that would pass it is not
made (it is counted as refused, and the rules' digest stands alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.providers.compression import Compressed, Compressor
from app.sessions.cleaning import render

__all__ = ["Compressed", "Compressor", "budget_for", "events_text"]

BLOCK_CHARS = 4000  # of one event


def budget_for(project_budget: int | None, server_budget: int) -> int:
    """A project's daily token budget: its own setting, never above the server's."""
    return server_budget if project_budget is None else min(project_budget, server_budget)


def events_text(events: Sequence[Mapping[str, Any]], max_chars: int) -> str:
    """The events as the model reads them: one rendered block each, the
    newest kept when the batch is over ``max_chars`` (the newest one always,
    cut to fit)."""
    blocks = [f"[{ev.get('kind')}] {render(ev)[0]}" for ev in events]
    out: list[str] = []
    size = 0
    for block in reversed(blocks):
        block = block[: min(BLOCK_CHARS, max_chars)]
        if size + len(block) > max_chars:
            break
        out.append(block)
        size += len(block) + 2
    return "\n\n".join(reversed(out))
