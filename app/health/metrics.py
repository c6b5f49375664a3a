"""``GET /metrics``: this process's figures, and the job queue's read from
the database (every tenant's, by kind) when the last reading is stale."""

from __future__ import annotations

from prometheus_client import generate_latest

from app import metrics, tenancy
from app.db import Database
from app.jobs import repository as jobs


async def scrape(db: Database, *, open_streams: int) -> bytes:
    metrics.STREAMS.set(open_streams)
    if metrics.queue_is_stale():
        async with tenancy.system_transaction(db) as session:
            metrics.set_queue(await jobs.queue_stats(session))
    return generate_latest(metrics.REGISTRY)
