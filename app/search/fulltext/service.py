"""The full-text stage's statistics, kept by the worker: which words are
common in a project, its size and average note length (the projects
columns ``term_stats_*``, which only this package writes)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.search.fulltext import repository as repo
from app.tenancy import Scope


async def refresh_term_stats(session: AsyncSession, scope: Scope, *, min_notes: int) -> int:
    """Recount the project's word statistics; how many words are common."""
    return await repo.refresh_term_stats(session, scope, min_notes=min_notes)
