"""``GET /v1/events`` as Server-Sent Events: a loop that reads the change
feed in short transactions (no connection held while it waits), sends what
the watch wants, a comment line when idle, and ends when the server drains.

Every API replica serves streams from the database, so a write made through
any replica (or by a worker) reaches every stream within
``events_poll_seconds``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from app import tenancy
from app.db import Database
from app.events import service as events
from app.logs import log_failure
from app.tenancy import Scope

log = logging.getLogger("keepmem.events")

BATCH = 100
RETRY_MS = 2000  # how long EventSource clients wait before reconnecting


def frame(event: dict[str, Any]) -> str:
    """One SSE message: the event's id (for ``Last-Event-ID``), the kind, JSON."""
    data = json.dumps(event, separators=(",", ":"), default=str)
    return f"id: {event['id']}\nevent: {event['kind']}\ndata: {data}\n\n"


async def stream(
    db: Database,
    scope: Scope,
    *,
    watch: events.Watch,
    cursor: int,
    poll_s: float,
    heartbeat_s: float,
    draining: Callable[[], bool],
) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n: stream open\n\n"  # never the feed's place: it is internal
    quiet_since = time.monotonic()
    try:
        while not draining():
            async with tenancy.transaction(db, scope) as session:
                batch, cursor, more = await events.read(
                    session, scope, cursor=cursor, watch=watch, limit=BATCH
                )
            for event in batch:
                yield frame(event)
            if batch:
                quiet_since = time.monotonic()
            if more:
                continue
            if time.monotonic() - quiet_since >= heartbeat_s:
                yield ": keepalive\n\n"
                quiet_since = time.monotonic()
            await asyncio.sleep(min(poll_s, heartbeat_s))
    except Exception as exc:  # noqa: BLE001 - the client resumes with Last-Event-ID
        log_failure(log, "event stream ended by an error", exc)
        yield 'event: error\ndata: {"error":"the stream failed; reconnect to resume"}\n\n'
        return
    yield 'event: shutdown\ndata: {"error":"the server is restarting; reconnect to resume"}\n\n'
