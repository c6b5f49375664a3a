"""The FastAPI application: lifespan, middleware, error handlers, routers."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.asyncio import Redis
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from app import __version__, docs, metrics, tracing
from app.admin.router import router as admin_router
from app.audit.router import router as audit_router
from app.auth.router import router as keys_router
from app.auth.router import subkeys as subkeys_router
from app.auth.router import whoami as whoami_router
from app.caches import RequestCaches
from app.cors import CorsMiddleware
from app.db import Database
from app.distill.router import router as distill_router
from app.errors import AppError, ProviderUnavailable, Unprocessable, as_app_error
from app.events.router import router as events_router
from app.flows.router import router as flows_router
from app.graph.router import router as graph_router
from app.grounding.router import router as grounding_router
from app.health.router import operations as operations_router
from app.health.router import router as health_router
from app.ingest.router import router as upload_router
from app.jobs.router import router as jobs_router
from app.logs import log_failure
from app.mcp_endpoint import PATH as MCP_PATH
from app.mcp_endpoint import McpEndpoint
from app.mem0compat.router import router as mem0_router
from app.memories.router import router as memories_router
from app.middleware import RequestContextMiddleware, json_safe
from app.notes.router import router as notes_router
from app.oauth.keyring import Keyring
from app.oauth.router import protocol as oauth_protocol
from app.oauth.router import router as oauth_router
from app.project_settings.router import router as settings_router
from app.providers.embedding.base import QueryCache
from app.providers.errors import ProviderError
from app.providers.factory import make_embedder
from app.ratelimit import StreamSlots
from app.replicas import ReplicaRouting, ReplicaSet
from app.request_vars import request_id_var
from app.search.router import router as search_router
from app.sessions.router import router as sessions_router
from app.settings import Settings
from app.tenants.router import router as projects_router
from app.ui import router as ui
from app.usage.router import router as usage_router

log = logging.getLogger("keepmem")

DESCRIPTION = """
keepmem is a hosted, multi-tenant reflective memory service for AI agents and
the server for the `keep` CLI (`KEEPNOTES_API_URL`, `KEEPNOTES_API_KEY`).

Authenticate with `Authorization: Bearer <API key>`; choose a project inside
your tenant with `X-Project: <slug>` (created on first use). Note ids in paths
are percent-encoded as one segment. Every error is
`{"error": "...", "code": "...", "request_id": "..."}`; the request id is also
in the `X-Request-ID` response header.
"""


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    request_id = request_id_var.get() or ""
    body: dict[str, Any] = {"error": message, "code": code, "request_id": request_id, **extra}
    return JSONResponse(body, status_code=status)


def _methods_for(app: FastAPI, request: Request) -> list[str]:
    """The methods the OpenAPI document lists for the request's path (for
    the ``Allow`` header of a 405: Starlette names only the first match). As
    in OpenAPI, a concrete path wins over a templated one (``/v1/notes/batch``
    over ``/v1/notes/{note_id}``)."""
    table: list[tuple[re.Pattern[str], int, list[str]]] | None = getattr(app.state, "allow", None)
    if table is None:
        table = []
        for template, operations in app.openapi().get("paths", {}).items():
            pattern = re.sub(r"\\\{[^}:]+:path\\\}", ".+", re.escape(template))
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
            methods = sorted(m.upper() for m in operations)
            table.append((re.compile(f"^{pattern}$"), template.count("{"), methods))
        app.state.allow = table
    path = request.scope.get("path", "")
    matches = [(params, methods) for regex, params, methods in table if regex.match(path)]
    if not matches:
        return []
    fewest = min(params for params, _ in matches)
    return sorted({m for params, methods in matches if params == fewest for m in methods})


class Drain:
    """Set when the server is asked to stop: event streams end (they would
    otherwise hold the shutdown until its grace period runs out)."""

    requested: bool = False


def drain(app: Any) -> None:
    """Begin draining ``app`` (from a signal handler: sets a flag only)."""
    state = getattr(app, "state", None)
    if state is not None and isinstance(getattr(state, "drain", None), Drain):
        state.drain.requested = True


def create_app(settings: Settings, *, db: Database | None = None) -> FastAPI:
    """Build the app. ``db`` may be injected (tests share one engine)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_db = db is None
        app.state.db = db if db is not None else Database.from_settings(settings)
        metrics.watch_pool(app.state.db.pool_status)
        app.state.replicas = ReplicaSet.from_settings(settings, app.state.db)
        metrics.watch_streams(app.state.streams.total)
        if provider is not None:
            tracing.instrument_engine(app.state.db.engine, provider)
            for replica in app.state.replicas.replicas if app.state.replicas else []:
                tracing.instrument_engine(replica.db.engine, provider)
        app.state.redis = Redis.from_url(settings.redis_url) if settings.redis_url else None
        # Query embeddings run in-process (the model loads on first use).
        app.state.embedder = make_embedder(settings)
        app.state.query_cache = QueryCache()
        app.state.caches = RequestCaches()
        app.state.keyring = (
            Keyring(
                settings.secret_key.get_secret_value(),
                access_ttl_s=settings.oauth_access_token_seconds,
            )
            if settings.secret_key is not None
            else None
        )
        if app.state.replicas is not None:
            await app.state.replicas.start()
        try:
            async with mcp.running(), metrics.live_figures_written():
                yield
        finally:
            if app.state.replicas is not None:
                await app.state.replicas.stop()
            app.state.drain.requested = True
            if provider is not None:
                provider.shutdown()  # flushes the spans still buffered
            await app.state.embedder.aclose()
            if app.state.redis is not None:
                await app.state.redis.aclose()
            if own_db:
                await app.state.db.dispose()

    app = FastAPI(
        title="keepmem",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # The docs page is served with assets from keepmem itself (below):
        # FastAPI's default loads them from a public CDN, blank offline.
        docs_url=None,
        redoc_url=None,
    )
    docs.mount(app)
    ui.mount(app)
    provider = tracing.setup(settings)
    if provider is not None:
        tracing.instrument_app(app, provider)
    app.state.settings = settings
    app.state.drain = Drain()
    # Open event streams per tenant (GET /v1/events and GET /mcp share them).
    app.state.streams = StreamSlots(settings.events_max_streams_per_tenant)
    # MCP for remote agents (streamable HTTP), beside the REST routes.
    mcp = McpEndpoint(app)
    app.router.routes.append(Route(MCP_PATH, endpoint=mcp, methods=["GET", "POST", "DELETE"]))
    docs.describe_mcp(app, MCP_PATH)

    @app.exception_handler(AppError)
    async def app_error(_: Request, exc: AppError) -> JSONResponse:
        extra = {"detail": exc.detail} if exc.detail is not None else {}
        response = _error(exc.status_code, exc.code, exc.message, **extra)
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(ProviderError)
    async def provider_error(request: Request, exc: ProviderError) -> JSONResponse:
        # A model or hosted API the request needed failed (the query embedder
        # of a find, say): the service is degraded, the request was fine.
        log_failure(log, "provider failed", exc)
        failed = ProviderUnavailable(
            f"a model provider failed: {str(exc)[:300]}", headers={"Retry-After": "5"}
        )
        return await app_error(request, failed)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = json_safe(exc.errors())
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", []))
        message = f"invalid request: {where}: {first.get('msg', 'invalid value')}"
        return await app_error(request, Unprocessable(message, detail=errors))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Raised by the framework (no route, wrong method, unreadable body) or
        # by the input checks: rendered as the AppError each one is.
        return await app_error(request, as_app_error(exc, allow=lambda: _methods_for(app, request)))

    app.include_router(health_router)
    app.include_router(operations_router)
    app.include_router(notes_router)
    app.include_router(flows_router)
    app.include_router(upload_router)
    app.include_router(graph_router)
    app.include_router(search_router)
    app.include_router(jobs_router)
    app.include_router(keys_router)
    app.include_router(subkeys_router)
    app.include_router(whoami_router)
    app.include_router(admin_router)
    app.include_router(oauth_router)
    app.include_router(oauth_protocol)
    app.include_router(audit_router)
    app.include_router(usage_router)
    app.include_router(events_router)
    app.include_router(sessions_router)
    app.include_router(memories_router)
    app.include_router(projects_router)
    app.include_router(settings_router)
    app.include_router(grounding_router)
    app.include_router(distill_router)
    app.include_router(mem0_router)  # mem0's hosted API under /mem0
    if settings.database_replica_urls:
        # Inside the request context: a read re-run on the primary keeps its
        # request id and is timed and counted once.
        app.add_middleware(ReplicaRouting)
    app.add_middleware(
        RequestContextMiddleware,
        max_body_bytes=settings.max_body_bytes,
        max_upload_bytes=settings.max_upload_bytes,
    )
    # Outermost: preflights never reach the app, and every answer to another
    # origin's page (a 413 of the size limit too) gets its CORS headers.
    app.add_middleware(CorsMiddleware)
    return app
