"""MCP served by keepmem itself at ``/mcp`` (streamable HTTP, stateless): the
same tools, prompts and resources as ``keepmem-mcp``, so a remote agent needs
no local proxy.

Authentication is the tenant's API key as a bearer token (``X-Project``
chooses the project). The tools are keepmem-client's, run against this very
app in process (``httpx.ASGITransport``) with the caller's key, so they go
through the same routes, rules, rate limit and error codes as any client.
Needs the ``keepmem-client[mcp]`` distribution (``make install`` puts it in);
without it ``/mcp`` answers 503 and says so.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import service as auth_service
from app.errors import NotConfigured, Unauthorized
from app.flows import prompts
from app.middleware import send_error
from app.notes.system_docs import SYSTEM_DOCS

log = logging.getLogger("keepmem.mcp")

PATH = "/mcp"
# The prompts every project is seeded with (rendered per project on use).
PROMPTS = [
    {"name": doc.id.removeprefix(prompts.PREFIX), "summary": prompts.describe(doc.body)}
    for doc in SYSTEM_DOCS
    if doc.id.startswith(prompts.PREFIX)
]

_client: contextvars.ContextVar[Any] = contextvars.ContextVar("keepmem_mcp_client")


class McpEndpoint:
    """The ``/mcp`` ASGI endpoint: checks the key, then hands the request to
    the MCP session manager with a client bound to that key."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.manager: Any = None
        try:
            from keepmem_client import AsyncKeepmem
            from keepmem_client.mcp_proxy import build
        except ImportError:  # the client distribution is not installed
            log.warning("keepmem-client[mcp] is not installed: /mcp is off")
            return
        # The mcp SDK configures the root logger when a server is made; the
        # service's logging is its own, so it is put back as it was.
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        server = build(lambda: _client.get(), PROMPTS)
        root.setLevel(level)
        root.handlers[:] = handlers
        server.streamable_http_app(stateless_http=True, json_response=True)
        self.manager = server.session_manager
        self.client_class = AsyncKeepmem

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager runs for the app's lifetime, in a task of its
        own (its task group is entered and left in that one task, whichever
        task starts and stops the app)."""
        if self.manager is None:
            yield
            return
        started, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(serve())
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():  # it failed to start: say why
            task.result()
        try:
            yield
        finally:
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = scope.get("state", {}).get("request_id", "")
        if self.manager is None:
            error = NotConfigured("MCP is not available here: install keepmem-client[mcp]")
            await send_error(send, error.status_code, error.code, error.message, request_id)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        presented = headers.get("authorization", "").removeprefix("Bearer ").strip()
        try:
            await self._check(scope, presented)
        except Unauthorized as exc:
            # Where an MCP client finds how to get a token (RFC 9728).
            metadata = _base_url(scope, headers) + "/.well-known/oauth-protected-resource/mcp"
            challenge = f'Bearer resource_metadata="{metadata}"'.encode("latin-1")
            await send_error(
                send, 401, exc.code, exc.message, request_id,
                headers=[(b"www-authenticate", challenge)],
            )  # fmt: skip
            return
        client = self.client_class(
            "http://keepmem.internal",
            presented,
            project=headers.get("x-project"),
            max_retries=0,
            transport=httpx.ASGITransport(app=self.app),
        )
        token = _client.set(client)
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            _client.reset(token)
            await client.aclose()

    async def _check(self, scope: Scope, presented: str) -> None:
        if not presented:
            raise Unauthorized("missing credentials: send 'Authorization: Bearer <key>'")
        app_state = scope["app"].state
        secret = app_state.settings.secret_key
        if secret is None:
            raise Unauthorized("server secret is not configured")
        async with app_state.db.transaction() as session:
            await auth_service.resolve_credential(
                session,
                presented=presented,
                server_secret=secret.get_secret_value(),
                keyring=app_state.keyring,
            )


def _base_url(scope: Scope, headers: dict[str, str]) -> str:
    """The public base URL: the configured one, else as this request reached us."""
    public: str | None = scope["app"].state.settings.public_url
    if public:
        return public.rstrip("/")
    host = headers.get("host") or "{}:{}".format(*scope.get("server") or ("localhost", 80))
    return f"{scope.get('scheme', 'http')}://{host}{scope.get('root_path', '')}"
