"""Planner statistics refreshed after large writes.

Autovacuum analyzes a table once a tenth of it changed, which at a million
notes is 100,000 rows: an import of a few thousand notes into a new project
leaves the planner guessing from statistics that never saw them (the recall
work of issue 36 met a find planned at 50 ms instead of 6 ms until
autovacuum ran). Every
worker looks, beside its dispatch loop, at how many rows of the note tables
changed since their last analyze (PostgreSQL counts them:
``pg_stat_user_tables.n_mod_since_analyze``) and past
``planner_stats_min_rows`` analyzes the table. Counting what changed, rather
than the requests that changed it, covers every way in: batches, imports,
single puts, and the vectors and passages the worker writes minutes after
the import's requests returned.

No request waits for it: it runs in the worker, in a task of its own (an
ANALYZE of a large table takes seconds; dispatching goes on meanwhile). The
database function takes an advisory lock and skips a table analyzed within
``planner_stats_interval_seconds``, so several workers analyze a table at
most once per interval between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from app.logs import log_failure
from app.pipeline import repository
from app.pipeline.pipeline import Pipeline

log = logging.getLogger("keepmem.planner_stats")

CHECK_EVERY_S = 10.0  # a look costs one read of the statistics views


async def refresh(pipeline: Pipeline) -> list[str]:
    """Analyze the note tables that changed enough; the tables analyzed."""
    settings = pipeline.settings
    if settings.planner_stats_min_rows <= 0:
        return []
    async with pipeline.db.transaction() as session:
        analyzed = await repository.refresh_planner_stats(
            session,
            min_rows=settings.planner_stats_min_rows,
            interval_seconds=settings.planner_stats_interval_seconds,
        )
    if analyzed:
        log.info("planner statistics refreshed: %s", ", ".join(analyzed))
    return analyzed


class Refresher:
    """Runs :func:`refresh` every ``every`` seconds in a task beside the
    dispatch loop (one at a time), never in it."""

    def __init__(self, pipeline: Pipeline, *, every: float = CHECK_EVERY_S) -> None:
        self.pipeline = pipeline
        self.every = every
        self._next = 0.0
        self._task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        """Start a look if one is due and none is running; returns at once."""
        if time.monotonic() < self._next or (self._task is not None and not self._task.done()):
            return
        self._next = time.monotonic() + self.every
        self._task = asyncio.create_task(self._run(), name="keepmem-planner-stats")

    async def _run(self) -> None:
        try:
            await refresh(self.pipeline)
        except Exception as exc:  # noqa: BLE001 - autovacuum still runs; next look retries
            log_failure(log, "planner statistics not refreshed (will retry)", exc)

    async def wait(self) -> None:
        """Until the look under way (if any) is over."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
