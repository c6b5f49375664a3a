"""Calls from web pages of other origins (CORS), allowed per project.

A project names the origins whose pages may call keepmem from a browser in
its settings (``cors_origins``, ``PATCH /v1/settings``; none by default).
How a request from another origin is answered:

- A request without ``Origin``, or whose ``Origin`` names the host it was
  sent to (keepmem's own pages), is not cross-origin: nothing changes.
- A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) carries no
  credential and so names no project: it is allowed when *some* project
  allows the origin (the service's set, read every few seconds), answered
  204 with the methods and the headers asked for; otherwise 403 without CORS
  headers, so the browser never sends the request.
- The request itself is checked once its credential and project are known
  (``app.deps.current_scope``): an origin its project does not allow is
  refused with 403 ``origin_not_allowed`` before the route runs, so nothing
  is done. An allowed one gets ``Access-Control-Allow-Origin`` (the origin
  itself) on its answer. An error gets it too when some project allows the
  origin, so an allowed page can read why it was refused (401, 429...).
- Credentials in CORS's sense (cookies, HTTP authentication) are never
  allowed, with ``*`` or with a named origin: keepmem's key travels in the
  ``Authorization`` header the page sets itself, which needs no cookie.
  ``Access-Control-Allow-Credentials`` is never sent.
- ``/mcp`` is not served to pages of other origins at all (the MCP
  transport's rule: servers check ``Origin``); MCP clients are programs.

A change to a project's list applies at once in the API process that made
it and within ``CACHE_SECONDS`` in the others.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import tenancy
from app.caches import LRU
from app.errors import BadRequest, Forbidden
from app.kit.origins import allows, listed, origin
from app.middleware import send_error
from app.tenancy import Scope as TenantScope
from app.tenants import service as tenants

CACHE_SECONDS = 5.0

METHODS = "GET, POST, PUT, PATCH, DELETE"
# What a page may read of an answer besides the CORS-safelisted headers.
EXPOSED = ", ".join(
    (
        "X-Request-Id",
        "Retry-After",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "Server-Timing",
        "Location",
        "X-Keepmem-Consistency",  # a write's token, for read-your-writes (app.replicas)
    )
)
MAX_AGE = "600"
# Header names a preflight may ask for (RFC 9110 tokens), echoed as asked.
_HEADER_LIST = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$")
MCP_PATH = "/mcp"


class OriginNotAllowed(Forbidden):
    code = "origin_not_allowed"


_projects: LRU[tuple[uuid.UUID, uuid.UUID], list[str]] = LRU(10_000, ttl=CACHE_SECONDS)


class _Everywhere:
    """The origins some project allows, read at most every CACHE_SECONDS."""

    def __init__(self) -> None:
        self.origins: frozenset[str] = frozenset()
        self.read_at = -CACHE_SECONDS
        self.lock = asyncio.Lock()

    async def get(self, load: Callable[[], Awaitable[set[str]]]) -> frozenset[str]:
        if time.monotonic() - self.read_at < CACHE_SECONDS:
            return self.origins
        async with self.lock:
            if time.monotonic() - self.read_at >= CACHE_SECONDS:
                try:
                    self.origins = frozenset(await load())
                except Exception:  # noqa: BLE001 - no database: allow no preflight now
                    self.origins = frozenset()
                self.read_at = time.monotonic()
        return self.origins


_everywhere = _Everywhere()


def forget(scope: TenantScope) -> None:
    """A project's list changed: this process reads it (and the service's
    set) afresh."""
    key = (scope.tenant_id, scope.project_id)
    _projects.drop(lambda k: k == key)
    _everywhere.read_at = -CACHE_SECONDS


def cross_origin(state: dict[str, Any]) -> str | None:
    """The request's foreign origin, as the middleware noted it."""
    value = state.get("cors_origin")
    return value if isinstance(value, str) else None


async def admit(session: AsyncSession, scope: TenantScope, state: dict[str, Any]) -> None:
    """Refuse a cross-origin request its project does not allow (before the
    route does anything); note an allowed one for the middleware."""
    given = cross_origin(state)
    if given is None:
        return
    key = (scope.tenant_id, scope.project_id)
    allowed = _projects.get(key)
    if allowed is None:
        allowed = listed(await tenants.project_settings(session, scope))
        _projects.put(key, allowed)
    if not allows(allowed, given):
        raise OriginNotAllowed(
            f"project {scope.project_slug!r} does not allow calls from pages of {given}: an "
            f'admin key adds it with PATCH /v1/settings {{"cors_origins": ["{given}"]}}'
        )
    state["cors_allowed"] = True


def _foreign(headers: dict[bytes, bytes]) -> str | None:
    """The request's Origin when it is another origin than keepmem's own."""
    raw = headers.get(b"origin")
    if raw is None:
        return None
    given = raw.decode("latin-1").strip()
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    netloc = urlsplit(given).netloc.lower() if "://" in given else ""
    if netloc and netloc == host:
        return None  # keepmem's own pages (the scheme may differ behind a proxy)
    try:
        return origin(given)
    except BadRequest:
        return given  # "null" and the like: compared as given, allowed by none but *


class CorsMiddleware:
    """Answers preflights and adds the CORS headers to what is allowed
    (pure ASGI, outermost, so refusals of the size limit get them too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = _foreign(headers)
        if given is None:
            await self.app(scope, receive, send)
            return
        everywhere = await self._everywhere(scope)
        if scope["method"] == "OPTIONS" and b"access-control-request-method" in headers:
            await self._preflight(send, given, headers, allows(everywhere, given))
            return
        if scope["path"] == MCP_PATH:
            await _refuse(send, "MCP is not served to web pages of other origins")
            return
        state = scope.setdefault("state", {})
        state["cors_origin"] = given

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                allowed = state.get("cors_allowed") is True or (
                    int(message["status"]) >= 400 and allows(everywhere, given)
                )
                extra = [(b"vary", b"Origin")]
                if allowed:
                    extra += [
                        (b"access-control-allow-origin", given.encode("latin-1")),
                        (b"access-control-expose-headers", EXPOSED.encode()),
                    ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _everywhere(self, scope: Scope) -> frozenset[str]:
        db = scope["app"].state.db

        async def load() -> set[str]:
            async with tenancy.system_transaction(db) as session:
                return await tenants.cors_origins(session)

        return await _everywhere.get(load)

    async def _preflight(
        self, send: Send, given: str, headers: dict[bytes, bytes], allowed: bool
    ) -> None:
        if not allowed:
            await _refuse(send, f"no project allows calls from pages of {given}")
            return
        out = [
            (b"access-control-allow-origin", given.encode("latin-1")),
            (b"access-control-allow-methods", METHODS.encode()),
            (b"access-control-max-age", MAX_AGE.encode()),
            (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
            (b"content-length", b"0"),
        ]
        asked = headers.get(b"access-control-request-headers", b"").decode("latin-1").strip()
        if asked and _HEADER_LIST.match(asked):
            out.append((b"access-control-allow-headers", asked.encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": out})
        await send({"type": "http.response.body", "body": b""})


async def _refuse(send: Send, message: str) -> None:
    await send_error(send, 403, OriginNotAllowed.code, message, uuid.uuid4().hex)
