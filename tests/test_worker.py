"""A real ARQ worker run against the real Redis and Postgres."""

from __future__ import annotations

import os

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker

from worker.settings import WorkerSettings


async def test_worker_runs_a_job_through_redis(settings, monkeypatch) -> None:
    monkeypatch.setenv("KEEPMEM_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("KEEPMEM_REDIS_URL", settings.redis_url)
    from app.settings import get_settings

    get_settings.cache_clear()
    try:
        redis_settings = RedisSettings.from_dsn(settings.redis_url)
        pool = await create_pool(redis_settings)
        job = await pool.enqueue_job("ping", _queue_name=WorkerSettings.queue_name)
        assert job is not None
        worker = Worker(
            functions=WorkerSettings.functions,
            on_startup=WorkerSettings.on_startup,
            on_shutdown=WorkerSettings.on_shutdown,
            queue_name=WorkerSettings.queue_name,
            redis_settings=redis_settings,
            burst=True,
            handle_signals=False,
        )
        await worker.main()
        assert worker.jobs_complete == 1 and worker.jobs_failed == 0
        assert await job.result(timeout=5) == "pong"
        await worker.close()
        await pool.aclose()
    finally:
        get_settings.cache_clear()
        assert "KEEPMEM_DATABASE_URL" in os.environ  # monkeypatch restores it after
