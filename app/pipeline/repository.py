"""SQL of the workers' own upkeep (not of any domain's rows)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession


async def refresh_planner_stats(
    session: AsyncSession, *, min_rows: int, interval_seconds: float
) -> list[str]:
    """ANALYZE the note tables changed by ``min_rows`` rows or more since
    their last analyze and not analyzed within ``interval_seconds``; the
    tables analyzed (none when another worker holds the turn). Runs as the
    schema owner (SECURITY DEFINER, migration 0019): only a table's owner
    may analyze it."""
    rows = await session.scalars(
        text("SELECT keepmem_refresh_planner_stats(:rows, :interval)"),
        {"rows": min_rows, "interval": interval_seconds},
    )
    return list(rows)
