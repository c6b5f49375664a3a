"""ARQ ``WorkerSettings``: a ``ctx`` built at startup with the pipeline, and the
outbox dispatcher running beside the job loop.

Task functions take ids only and call app services.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from arq.connections import RedisSettings

from app import metrics, tracing
from app.db import Database
from app.health import repository as health
from app.pipeline import dispatcher, runner
from app.providers.embedding.base import QueryCache
from app.providers.factory import (
    make_compressor,
    make_embedder,
    make_extractor,
    make_summarizer,
)
from app.settings import get_settings


async def startup(ctx: dict[str, Any]) -> None:
    settings = get_settings()
    pipeline = runner.Pipeline(
        db=Database.from_settings(settings),
        settings=settings,
        embedder=make_embedder(settings),
        summarizer=make_summarizer(settings),
        query_cache=QueryCache(),
        compressor=make_compressor(settings),
        extractor=make_extractor(settings),
    )
    ctx["pipeline"] = pipeline
    metrics.watch_pool(pipeline.db.pool_status)
    if settings.worker_metrics_port:
        metrics.serve(settings.worker_metrics_port, settings.worker_metrics_host)
    ctx["tracing"] = tracing.setup(settings)
    if ctx["tracing"] is not None:
        tracing.instrument_engine(pipeline.db.engine, ctx["tracing"])
    # Load the model before taking work: the first job should not pay for it,
    # and building the graph holds the interpreter long enough to delay
    # heartbeats of jobs already running.
    await pipeline.embedder.embed_documents(["warm up"])
    ctx["dispatcher"] = asyncio.create_task(dispatcher.loop(pipeline, ctx["redis"]))


async def shutdown(ctx: dict[str, Any]) -> None:
    task = ctx.get("dispatcher")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    pipeline: runner.Pipeline | None = ctx.get("pipeline")
    if pipeline is not None:
        await pipeline.aclose()
        await pipeline.db.dispose()
    if ctx.get("tracing") is not None:
        ctx["tracing"].shutdown()  # flushes the spans still buffered


async def run_jobs(ctx: dict[str, Any], tenant_id: str, job_ids: list[int]) -> dict[int, str]:
    """Run outbox jobs of one tenant (retries and dead letters are recorded on their rows)."""
    return await runner.run_batch(ctx["pipeline"], uuid.UUID(tenant_id), job_ids)


async def ping(ctx: dict[str, Any]) -> str:
    """Round trip through the queue and the database."""
    db: Database = ctx["pipeline"].db
    async with db.transaction() as session:
        await health.ping(session)
    return "pong"


def redis_settings() -> RedisSettings:
    url = get_settings().redis_url
    if not url:
        raise RuntimeError("KEEPMEM_REDIS_URL is not set")
    return RedisSettings.from_dsn(url)


class WorkerSettings:
    functions = [run_jobs, ping]
    on_startup = startup
    on_shutdown = shutdown
    queue_name = get_settings().queue_name
    handle_signals = True
    # SIGTERM: take no new jobs, let running ones finish this long.
    job_completion_wait = get_settings().worker_drain_seconds
    max_jobs = get_settings().worker_concurrency
    job_timeout = get_settings().job_timeout_seconds
    keep_result = 60
    poll_delay = get_settings().worker_poll_seconds
    max_tries = 1  # retries belong to the outbox, not to ARQ
