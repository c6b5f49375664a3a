"""What the sync and async clients share: configuration, how a call is
described, error mapping and the retry policy."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from keepmem_client._errors import APIError, RateLimitError, error_for

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8765"
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 2
USER_AGENT = "keepmem-client/0.1.0"


def note_path(note_id: str, suffix: str = "") -> str:
    """A note id as one path segment (ids may hold ``/``, ``:``, spaces)."""
    return f"/v1/notes/{quote(note_id, safe='')}{suffix}"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API call: what to send, whether it may be retried, how to read
    the answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] | None = None
    json: Any = None
    files: Any = None
    data: Any = None
    idempotent: bool = False


@dataclass(frozen=True, slots=True)
class Config:
    base_url: str
    api_key: str | None
    project: str | None
    timeout: float
    max_retries: int
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        base_url: str | None,
        api_key: str | None,
        project: str | None,
        timeout: float | None,
        max_retries: int | None,
        headers: Mapping[str, str] | None,
    ) -> Config:
        """Arguments first, then ``KEEPMEM_URL`` / ``KEEPMEM_API_KEY`` /
        ``KEEPMEM_PROJECT``, then the defaults."""
        return cls(
            base_url=(base_url or os.environ.get("KEEPMEM_URL") or DEFAULT_URL).rstrip("/"),
            api_key=api_key if api_key is not None else os.environ.get("KEEPMEM_API_KEY"),
            project=project if project is not None else os.environ.get("KEEPMEM_PROJECT"),
            timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
            max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
            headers=dict(headers or {}),
        )

    def default_headers(self) -> dict[str, str]:
        out = {"User-Agent": USER_AGENT, **self.headers}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        if self.project:
            out["X-Project"] = self.project
        return out


#: A write's consistency token (its WAL position on the primary), sent back
#: on later requests: a read replica serves them only once it has that write.
CONSISTENCY_HEADER = "X-Keepmem-Consistency"


def _lsn(token: str) -> int | None:
    high, sep, low = token.strip().partition("/")
    try:
        return (int(high, 16) << 32) | int(low, 16) if sep else None
    except ValueError:
        return None


class Consistency:
    """Read-your-writes across read replicas: the newest consistency token
    this client's writes were answered with, sent on every later request
    (unless the caller set the header). Shared by the client's threads or
    tasks: a token only ever moves forward."""

    __slots__ = ("_lock", "_position", "token")

    def __init__(self) -> None:
        self.token: str | None = None
        self._position = -1
        self._lock = threading.Lock()

    def observe(self, response: httpx.Response) -> None:
        given = response.headers.get(CONSISTENCY_HEADER)
        if not given:
            return
        position = _lsn(given)
        with self._lock:
            if position is None:  # not a position: keep the newest given
                self.token = given
            elif position > self._position:
                self._position, self.token = position, given

    def stamp(self, request: httpx.Request) -> None:
        if self.token and CONSISTENCY_HEADER not in request.headers:
            request.headers[CONSISTENCY_HEADER] = self.token

    def hooks(self) -> dict[str, list[Callable[..., Any]]]:
        """httpx event hooks for a sync client."""
        return {"request": [self.stamp], "response": [self.observe]}

    def async_hooks(self) -> dict[str, list[Callable[..., Any]]]:
        """httpx event hooks for an async client (they must be coroutines)."""

        async def stamp(request: httpx.Request) -> None:
            self.stamp(request)

        async def observe(response: httpx.Response) -> None:
            self.observe(response)

        return {"request": [stamp], "response": [observe]}


def clean(values: Mapping[str, Any]) -> dict[str, Any]:
    """Without the ``None`` values (the server's defaults apply)."""
    return {k: v for k, v in values.items() if v is not None}


def raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text[:500] or response.reason_phrase}
    raise error_for(response.status_code, body, dict(response.headers))


def should_retry(error: Exception, call: Call[Any]) -> bool:
    """Connection failures, 429 and 5xx, for calls that are safe to repeat."""
    if not call.idempotent:
        return False
    if isinstance(error, RateLimitError):
        return True
    if isinstance(error, APIError):
        return error.status >= 500
    return isinstance(error, httpx.TransportError)


def backoff(attempt: int, error: Exception) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): ``Retry-After``
    when the server gave one (at most 60), else 0.5 s doubling with jitter."""
    if isinstance(error, RateLimitError) and error.retry_after is not None:
        return min(error.retry_after, 60.0)
    return float(min(0.5 * 2 ** (attempt - 1), 8.0) * (0.5 + random.random() / 2))
