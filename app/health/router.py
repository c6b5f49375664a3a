"""Readiness and health (KEEP_PROTOCOL §3.2). No key needed."""

from __future__ import annotations

import asyncio
import hmac
import os
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app import __version__
from app.deps import AdminCredentials, OptionalScope, SessionDep, SettingsDep
from app.errors import NotConfigured, Unauthorized
from app.health import metrics as metrics_service
from app.health import repository
from app.notes import service as notes
from app.wire import api_router

router = api_router(prefix="/v1", tags=["health"])
operations = api_router(tags=["health"])


async def _status(request: Request, session: SessionDep) -> tuple[int, dict[str, Any]]:
    warnings: list[str] = []
    try:
        await repository.ping(session)
    except Exception as exc:  # noqa: BLE001 - reported as 503 with the cause
        warnings.append(f"database unavailable: {type(exc).__name__}")
    redis = getattr(request.app.state, "redis", None)
    if redis is None:
        warnings.append("redis not configured: background work waits in the outbox")
    else:
        try:
            await asyncio.wait_for(redis.ping(), timeout=2)
        except Exception as exc:  # noqa: BLE001 - degraded, reported in warnings
            warnings.append(f"redis unavailable: {type(exc).__name__}")
    drain = getattr(request.app.state, "drain", None)
    if drain is not None and drain.requested:
        warnings.append("draining: the server is shutting down")
    ok = not any(w.startswith(("database", "draining")) for w in warnings)
    body: dict[str, Any] = {
        "status": "ok" if ok else "unavailable",
        "pid": os.getpid(),
        "version": __version__,
        "service": "keepmem",
        "embedding": None,
        "summarization": "truncate",
        "needs_setup": False,
        "warnings": warnings,
        "capabilities": {
            "api_version": 1,
            "export_snapshot": True,
            "export_stream_ndjson": True,
            "export_bundle": True,
            "export_changes": True,
            "remote_incremental_markdown_sync": False,
        },
        "network": {"mode": "hosted", "bind_host": None, "advertised_url": None},
    }
    return (200 if ok else 503), body


@router.get("/ready", summary="Readiness")
async def ready(request: Request, session: SessionDep) -> JSONResponse:
    """200 when the database answers; lists degraded parts in `warnings`."""
    status, body = await _status(request, session)
    return JSONResponse(body, status_code=status)


@router.get(
    "/health",
    summary="Health, with the caller's note count",
    # the key is optional here: {} in the security list says so
    openapi_extra={"security": [{}]},
)
async def health(request: Request, session: SessionDep, scope: OptionalScope) -> JSONResponse:
    """Like /v1/ready, plus `item_count` of the caller's project when a valid
    key is sent (null otherwise)."""
    status, body = await _status(request, session)
    body["item_count"] = await notes.count(session, scope) if scope and status == 200 else None
    return JSONResponse(body, status_code=status)


@router.get("/live", summary="Liveness")
async def live() -> dict[str, str]:
    """200 while the process serves requests; needs nothing else (a
    database outage is readiness's concern, not a reason to restart)."""
    return {"status": "ok"}


@operations.get(
    "/metrics",
    summary="Prometheus metrics",
    # No response_class: the errors keep their JSON shape in the document.
    response_model=None,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
    openapi_extra={"security": [{"AdminToken": []}]},
)
async def prometheus(
    request: Request, settings: SettingsDep, credentials: AdminCredentials
) -> PlainTextResponse:
    """Request latencies by route and status, the job queue by kind (depth,
    oldest age, dead jobs), the database pool and the process. Send
    `Authorization: Bearer <KEEPMEM_METRICS_TOKEN>` (or the admin token)."""
    allowed = [s.get_secret_value() for s in (settings.metrics_token, settings.admin_token) if s]
    if not allowed:
        raise NotConfigured("metrics are disabled: set KEEPMEM_METRICS_TOKEN")
    presented = (credentials.credentials if credentials else "").encode()
    if not any(hmac.compare_digest(presented, token.encode()) for token in allowed):
        raise Unauthorized("send 'Authorization: Bearer <KEEPMEM_METRICS_TOKEN>'")
    streams = request.app.state.streams.total()
    body = await metrics_service.scrape(request.app.state.db, open_streams=streams)
    return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)
