"""ARQ ``WorkerSettings``: a ``ctx`` built at startup with the database and settings.

Task functions take ids only and call app services; the background pipeline
(outbox dispatch, embed, summarize, analyze) registers its tasks here.
"""

from __future__ import annotations

from typing import Any

from arq.connections import RedisSettings

from app.db import Database
from app.settings import Settings, get_settings


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = get_settings()
    ctx["settings"] = settings
    ctx["db"] = Database.from_settings(settings)


async def shutdown(ctx: dict[str, Any]) -> None:
    db: Database | None = ctx.get("db")
    if db is not None:
        await db.dispose()


async def ping(ctx: dict[str, Any]) -> str:
    """Round trip through the queue and the database; used by readiness checks."""
    from app.health import repository

    db: Database = ctx["db"]
    async with db.transaction() as session:
        await repository.ping(session)
    return "pong"


def redis_settings() -> RedisSettings:
    url = get_settings().redis_url
    if not url:
        raise RuntimeError("KEEPMEM_REDIS_URL is not set")
    return RedisSettings.from_dsn(url)


class WorkerSettings:
    functions = [ping]
    on_startup = startup
    on_shutdown = shutdown
    queue_name = "keepmem:queue"
    handle_signals = True
    max_jobs = 10
