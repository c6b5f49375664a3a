"""Pure ASGI middleware: request ids, body size limit, raw note-id paths."""

from __future__ import annotations

import json
import logging
import math
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.db import is_outage
from app.errors import DatabaseUnavailable
from app.logs import log_failure
from app.request_vars import request_id_var, timings_var

log = logging.getLogger("keepmem")

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
REQUEST_ID_HEADER = "x-request-id"
_ID_HEADER = REQUEST_ID_HEADER.encode()


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    request_id: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps({"error": message, "code": code, "request_id": request_id}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (REQUEST_ID_HEADER.encode(), request_id.encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


UPLOAD_PATH = "/v1/upload"
IMPORT_PATH = "/v1/import"
# Whole documents and whole exports: the upload limit, not the body limit.
LARGE_BODY_PATHS = (UPLOAD_PATH, IMPORT_PATH)
# Paths whose last segments are a percent-encoded note id ("%2F" kept).
RAW_ID_PATHS = (b"/v1/notes/", b"/v1/export/bundles/")
MULTIPART_OVERHEAD = 64 * 1024  # form fields and part headers around the file


def _server_timing(total_ms: float, parts: dict[str, float]) -> str:
    entries = [f"app;dur={total_ms:.2f}"]
    entries += [f"{name};dur={ms:.2f}" for name, ms in parts.items()]
    return ", ".join(entries)


class RequestContextMiddleware:
    """Gives every request an id (echoing a sane client ``X-Request-ID``),
    refuses bodies over the limit with 413, and keeps percent-encoded
    slashes in ``/v1/notes/{id}`` so note ids may contain ``/``."""

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, max_upload_bytes: int | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        # File uploads carry whole documents: their own (larger) limit.
        self.max_upload_bytes = max_upload_bytes or max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        request_id = given if _SAFE_REQUEST_ID.match(given) else uuid.uuid4().hex
        spent: dict[str, float] = {}
        timings_token = timings_var.set(spent)
        token = request_id_var.set(request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        try:
            raw_path: bytes | None = scope.get("raw_path")
            if raw_path and raw_path.startswith(RAW_ID_PATHS):
                scope = dict(scope)
                scope["path"] = raw_path.split(b"?", 1)[0].decode("latin-1")

            limit = self.max_body_bytes
            if scope["path"] in LARGE_BODY_PATHS:
                limit = self.max_upload_bytes + MULTIPART_OVERHEAD
            too_large = f"request body is larger than {limit} bytes"
            declared = headers.get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                await send_error(send, 413, "payload_too_large", too_large, request_id)
                return

            received = 0
            started = False

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > limit:
                        raise _TooLarge
                return message

            began = time.perf_counter()
            status = 500

            async def send_with_id(message: Message) -> None:
                nonlocal started, status
                if message["type"] == "http.response.start":
                    started = True
                    status = int(message["status"])
                    message = dict(message)
                    elapsed = (time.perf_counter() - began) * 1000
                    # (send_error, used by the endpoints that are no route,
                    # states the request id already)
                    given = [h for h in message.get("headers", []) if h[0] != _ID_HEADER]
                    message["headers"] = [
                        *given,
                        (_ID_HEADER, request_id.encode()),
                        # Time spent in the service, for clients and benchmarks.
                        (b"server-timing", _server_timing(elapsed, spent).encode()),
                    ]
                await send(message)

            try:
                await self.app(scope, limited_receive, send_with_id)
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                metrics.observe_request(
                    scope.get("method", ""), route, status, time.perf_counter() - began
                )
            except _TooLarge:
                if not started:
                    await send_error(send, 413, "payload_too_large", too_large, request_id)
            except Exception as exc:  # noqa: BLE001 - last resort: logged, answered 5xx
                # Last line: a database that cannot be reached is a 503 (it
                # heals by itself); anything else unexpected (a failed commit
                # included) a 500. Either is logged once per kind and period
                # (an outage fails every request the same way), with the
                # request id of the one logged.
                if is_outage(exc):
                    log_failure(log, f"database unavailable (request_id={request_id})", exc)
                    if not started:
                        await send_error(
                            send,
                            503,
                            DatabaseUnavailable.code,
                            "the database is unavailable; retry shortly",
                            request_id,
                            headers=[(b"retry-after", b"5")],
                        )
                else:
                    log_failure(
                        log, f"unhandled error (request_id={request_id})", exc, traceback=True
                    )
                    if not started:
                        await send_error(
                            send, 500, "internal_error", "internal server error", request_id
                        )
        finally:
            request_id_var.reset(token)
            timings_var.reset(timings_token)


def json_safe(value: Any) -> Any:
    """Validation error details with non-JSON values (objects, bytes,
    infinities) turned into strings."""

    def finite(item: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            return str(item)
        if isinstance(item, dict):
            return {str(k): finite(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [finite(v) for v in item]
        return item

    return finite(json.loads(json.dumps(value, default=str)))
