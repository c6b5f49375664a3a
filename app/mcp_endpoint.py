"""MCP served by keepmem itself at ``/mcp`` (streamable HTTP, stateless): the
same tools, prompts and resources as ``keepmem-mcp``, so a remote agent needs
no local proxy.

Authentication is the tenant's API key as a bearer token (``X-Project``
chooses the project; the prompts listed are that project's own). The tools
are keepmem-client's, run against this very app in process
(``httpx.ASGITransport``) with the caller's key, so they go through the same
routes, rules, rate limit and error codes as any client.
Needs the ``keepmem-client[mcp]`` distribution (``make install`` puts it in);
without it ``/mcp`` answers 503 and says so.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from app import ratelimit
from app.auth import service as auth_service
from app.errors import (
    AppError,
    BadRequest,
    MethodNotAllowed,
    NotConfigured,
    Unauthorized,
    UnsupportedMediaType,
)
from app.kit import storable
from app.kit.ids import InvalidId, validate_project_slug
from app.logs import Throttle
from app.middleware import send_error
from app.oauth import resource, tokens

log = logging.getLogger("keepmem.mcp")

PATH = "/mcp"

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
        # Prompts are listed per request: each caller's project's own. A file
        # to ingest comes as content: a path would name this server's files.
        server = build(lambda: _client.get(), files=False)
        root.setLevel(level)
        root.handlers[:] = handlers
        # The SDK logs a line (a traceback for a crash) per failed request:
        # as the service's own failures, one line per kind per minute.
        Throttle.install("mcp")
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
        tenant_header = headers.get(tokens.TENANT_HEADER.lower())
        try:
            tenant_id = await self._check(
                scope, presented, _base_url(scope, headers), tenant_header
            )
        except Unauthorized as exc:
            # Where an MCP client finds how to get a token (RFC 9728).
            metadata = _base_url(scope, headers) + "/.well-known/oauth-protected-resource/mcp"
            challenge = f'Bearer resource_metadata="{metadata}"'.encode("latin-1")
            refused: AppError = exc
            try:  # a failed authentication, as on every other route
                await _count_failure(scope)
            except AppError as limited:
                refused = limited
            await _refuse(send, refused, request_id, extra=[(b"www-authenticate", challenge)])
            return
        method = scope.get("method", "")
        if method not in ("GET", "POST"):  # no sessions to end: the transport is stateless
            refused = MethodNotAllowed(
                f"{method} is not allowed on {PATH}: POST a JSON-RPC message, or GET the "
                "event stream",
                headers={"Allow": "GET, POST"},
            )
            await _refuse(send, refused, request_id)
            return
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if method == "POST" and content_type != "application/json":
            wrong = UnsupportedMediaType(
                "send the JSON-RPC message with 'Content-Type: application/json'"
            )
            await _refuse(send, wrong, request_id)
            return
        project = headers.get("x-project")
        if project is not None:
            try:  # the REST routes' rule, refused before any tool runs
                validate_project_slug(project)
            except InvalidId as exc:
                await _refuse(send, BadRequest(str(exc)), request_id)
                return
        if method == "POST":
            body = await _whole_body(receive)
            if (problem := _not_jsonrpc(body)) is not None:
                await _jsonrpc_refusal(send, problem)
                return
            receive = _replay(body)
        if method == "GET":
            try:
                scope["app"].state.streams.take(tenant_id)
            except AppError as full:
                await _refuse(send, full, request_id)
                return
        # The tools' requests reach this app in process, at the origin this
        # request reached (an access token names the server it is for) and
        # naming the tenant it named, if any.
        client = self.client_class(
            _origin(scope, headers),
            presented,
            project=project,
            max_retries=0,
            headers={tokens.TENANT_HEADER: tenant_header} if tenant_header else None,
            transport=httpx.ASGITransport(app=self.app, root_path=scope.get("root_path", "")),
        )
        token = _client.set(client)
        try:
            if method == "GET":
                seconds = scope["app"].state.settings.mcp_stream_max_seconds
                await _for_at_most(seconds, self.manager.handle_request, scope, receive, send)
            else:
                await self.manager.handle_request(scope, receive, send)
        finally:
            if method == "GET":
                scope["app"].state.streams.give_back(tenant_id)
            _client.reset(token)
            await client.aclose()

    async def _check(
        self, scope: Scope, presented: str, issuer: str, tenant_header: str | None
    ) -> uuid.UUID:
        """The tenant the credential is for (401 when it is none)."""
        if not presented:
            raise Unauthorized("missing credentials: send 'Authorization: Bearer <key>'")
        app_state = scope["app"].state
        secret = app_state.settings.secret_key
        if secret is None:
            raise Unauthorized("server secret is not configured")
        keyring = app_state.keyring
        verifier = tokens.Verifier.of(keyring, issuer, tenant_header) if keyring else None
        async with app_state.db.transaction() as session:
            credential = await auth_service.resolve_credential(
                session,
                presented=presented,
                server_secret=secret.get_secret_value(),
                verifier=verifier,
            )
        return credential.tenant.tenant_id


def _origin(scope: Scope, headers: dict[str, str]) -> str:
    """Scheme and host this request reached us at."""
    host = headers.get("host") or "{}:{}".format(*scope.get("server") or ("localhost", 80))
    return f"{scope.get('scheme', 'http')}://{host}"


def _base_url(scope: Scope, headers: dict[str, str]) -> str:
    """The public base URL (the OAuth issuer): the configured one, else as
    this request reached us."""
    public: str | None = scope["app"].state.settings.public_url
    return resource.issuer_of(public, _origin(scope, headers) + scope.get("root_path", ""))


async def _count_failure(scope: Scope) -> None:
    """Count a failed authentication against the client's address (429 once
    past ``auth_failures_per_minute``)."""
    state = scope["app"].state
    client = scope.get("client")
    await ratelimit.count_failure(
        state.redis,
        address=client[0] if client else "unknown",
        failures_per_minute=state.settings.auth_failures_per_minute,
    )


async def _refuse(
    send: Send, error: AppError, request_id: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Answer ``error`` in the service's error shape (what keepmem decides
    before the MCP layer reads the message: credentials, rate limits, media
    type, stream slots; JSON-RPC errors are the MCP layer's)."""
    given = error.headers.items()
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in given]
    if error.status_code == 401 and extra:  # the challenge (in place of a bare "Bearer")
        names = {name for name, _ in extra}
        headers = [*(h for h in headers if h[0] not in names), *extra]
    await send_error(send, error.status_code, error.code, error.message, request_id, headers)


async def _for_at_most(
    seconds: float, app: Any, scope: Scope, receive: Receive, send: Send
) -> None:
    """Serve a streaming response for at most ``seconds``, then end it as a
    finished response (the client reconnects): no stream holds a slot, a
    connection and a task forever."""
    started = ended = False

    async def tracked(message: Any) -> None:
        nonlocal started, ended
        if message["type"] == "http.response.start":
            started = True
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            ended = True
        await send(message)

    try:
        async with asyncio.timeout(seconds):
            await app(scope, receive, tracked)
    except TimeoutError:
        log.debug("an MCP stream reached its limit of %s s", seconds)
    if started and not ended:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


# -- the JSON-RPC envelope, checked before the MCP layer reads it ---------------------


async def _whole_body(receive: Receive) -> bytes:
    """The request body (the middleware has already bounded its size)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """A ``receive`` that hands the MCP layer the body already read."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


def _not_jsonrpc(body: bytes) -> str | None:
    """Why ``body`` is not one JSON-RPC 2.0 message (None when it is): the
    same depth and number rules as every other body, an id that is a string
    or an integer (else the MCP layer would take the message for a
    notification and drop it), params an object when present."""
    try:
        message = storable.loads(body, where="message")
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not a JSON message: {exc}"[:300]
    if not isinstance(message, dict):
        return "a JSON-RPC message is one JSON object (batches are not supported)"
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in message and not isinstance(message["method"], str):
        return "method must be a string"
    if "id" in message and (
        isinstance(message["id"], bool) or not isinstance(message["id"], int | str)
    ):
        return "id must be a string or an integer"
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return "params must be an object"
    return None


async def _jsonrpc_refusal(send: Send, problem: str) -> None:
    """400 with a JSON-RPC "Invalid Request" error (what an MCP client reads;
    the middleware adds the request id header)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": problem}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
