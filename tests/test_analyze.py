"""Planner statistics refreshed after large writes (``app.pipeline.planner_stats``):
the worker analyzes the note tables once enough of their rows changed, not
the request that changed them; one worker at a time, a table at most once
per interval. PostgreSQL's own counters (``pg_stat_user_tables``) tell."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from arq import create_pool
from arq.connections import RedisSettings
from sqlalchemy import text

from app.db import Database
from app.pipeline import dispatcher, planner_stats

TURN = "hashtextextended('keepmem.planner_stats', 0)"


@pytest.fixture
async def owner(settings) -> AsyncIterator[Database]:
    database = Database(settings.owner_database_url or "")
    yield database
    await database.dispose()


@pytest.fixture
async def no_autovacuum(owner: Database) -> AsyncIterator[None]:
    """Autovacuum would analyze the small test tables on its own, at a moment
    of its choosing: off for ``notes`` while a test counts analyzes."""
    async with owner.transaction() as s:
        await s.execute(text("ALTER TABLE notes SET (autovacuum_enabled = false)"))
    try:
        yield
    finally:
        async with owner.transaction() as s:
            await s.execute(text("ALTER TABLE notes RESET (autovacuum_enabled)"))


async def _notes(owner: Database) -> Any:
    async with owner.transaction() as s:
        return (
            await s.execute(
                text(
                    "SELECT analyze_count, last_analyze, n_mod_since_analyze, "
                    "autoanalyze_count FROM pg_stat_user_tables WHERE relname = 'notes'"
                )
            )
        ).one()


async def _until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 60) -> None:
    """Wait for ``check`` (backends report their row counts within seconds)."""
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.2)


async def _batches(client, tenant, count: int, words: str = "note") -> None:
    for b in range(count):
        notes = [{"id": f"n-{b}-{i}", "content": f"{words} {b} {i}"} for i in range(100)]
        r = await client.post("/v1/notes/batch", headers=tenant.headers, json={"notes": notes})
        assert r.status_code == 200, r.text
        assert r.json()["stored"] == 100, r.text


async def _counted(owner: Database, rows: int) -> None:
    async def enough() -> bool:
        return int((await _notes(owner)).n_mod_since_analyze) >= rows

    await _until(enough, f"{rows} changed rows of notes counted")


async def _interval_over(owner: Database, seconds: float) -> None:
    """Until ``notes`` was last analyzed more than ``seconds`` ago."""

    async def over() -> bool:
        async with owner.transaction() as s:
            return bool(
                await s.scalar(
                    text(
                        "SELECT coalesce(clock_timestamp() - greatest(last_analyze, "
                        "last_autoanalyze) > make_interval(secs => :s), true) "
                        "FROM pg_stat_user_tables WHERE relname = 'notes'"
                    ),
                    {"s": seconds},
                )
            )

    await _until(over, f"{seconds} s since the last analyze of notes")


async def test_a_large_batch_is_analyzed_by_the_worker_not_the_request(
    client, tenant, make_pipeline, settings, owner, no_autovacuum
) -> None:
    pipeline = make_pipeline(
        planner_stats_min_rows=300,
        planner_stats_interval_seconds=1.0,
        queue_name=f"keepmem:test-analyze:{uuid.uuid4().hex}",  # no worker reads it
    )
    before = await _notes(owner)
    await _batches(client, tenant, 4)
    # the requests are answered and nothing analyzed the table for them
    assert (await _notes(owner)).analyze_count == before.analyze_count
    await _counted(owner, 300)

    # the worker's dispatch loop, as `keepmem worker` runs it
    redis = await create_pool(RedisSettings.from_dsn(settings.redis_url))
    stop = asyncio.Event()
    worker = asyncio.create_task(dispatcher.loop(pipeline, redis, stop=stop))
    try:

        async def analyzed() -> bool:
            return int((await _notes(owner)).analyze_count) > int(before.analyze_count)

        await _until(analyzed, "the worker's ANALYZE of notes")
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
        await redis.aclose()
    after = await _notes(owner)
    assert before.last_analyze is None or after.last_analyze > before.last_analyze
    assert after.n_mod_since_analyze < 300


async def test_one_worker_at_a_time_and_a_table_once_per_interval(
    client, tenant, make_pipeline, owner, no_autovacuum
) -> None:
    often = make_pipeline(planner_stats_min_rows=100, planner_stats_interval_seconds=1.0)
    await _batches(client, tenant, 2)
    await _counted(owner, 100)
    assert await planner_stats.refresh(make_pipeline(planner_stats_min_rows=0)) == []  # off
    # another worker holds the turn: this one skips the round
    async with owner.engine.connect() as other:
        await other.execute(text(f"SELECT pg_advisory_lock({TURN})"))
        try:
            assert await planner_stats.refresh(often) == []
        finally:
            await other.execute(text(f"SELECT pg_advisory_unlock({TURN})"))
            await other.commit()
    await _interval_over(owner, 1.2)  # (an earlier test may have analyzed it just now)
    assert "notes" in await planner_stats.refresh(often)

    # changed enough again, but analyzed within the interval: not yet
    await _batches(client, tenant, 1, "changed")  # the same ids: updates, counted too
    await _counted(owner, 100)
    hourly = make_pipeline(planner_stats_min_rows=100, planner_stats_interval_seconds=3600.0)
    assert "notes" not in await planner_stats.refresh(hourly)
    await _interval_over(owner, 1.2)
    assert "notes" in await planner_stats.refresh(often)


async def test_the_refresher_runs_beside_the_caller(make_pipeline) -> None:
    """poke() starts a look and returns; one look at a time, one per period."""
    stats = planner_stats.Refresher(make_pipeline(planner_stats_min_rows=10**9), every=3600)
    stats.poke()
    first = stats._task
    assert first is not None and not first.done()  # started, not awaited
    stats.poke()
    assert stats._task is first  # not due again
    await stats.wait()
    assert first.done() and first.exception() is None
    await stats.aclose()
