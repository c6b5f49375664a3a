"""The SDK's exceptions: one tree, as httpx and the big AI SDKs do it.

    KeepmemError
    ├── APIConnectionError            the server could not be reached
    │   └── APITimeoutError           ... or did not answer in time
    └── APIError                      the server answered with an error
        ├── BadRequestError           400 (a rule, or text that cannot be stored)
        ├── AuthenticationError       401
        ├── PermissionDeniedError     403
        ├── NotFoundError             404
        ├── ConflictError             409
        ├── PayloadTooLargeError      413
        ├── ValidationError           422 (the request does not match the schema)
        ├── RateLimitError            429 (``retry_after`` seconds)
        └── InternalServerError       5xx
            └── ServiceUnavailableError   503 (database or model provider down)

Every ``APIError`` carries ``status``, ``code`` (stable, e.g. ``note_not_found``),
``message`` and ``request_id`` (quote it when reporting a problem).
"""

from __future__ import annotations

from typing import Any


class KeepmemError(Exception):
    """Base of every error the SDK raises."""


class APIConnectionError(KeepmemError):
    """The request did not reach keepmem, or no answer came back."""


class APITimeoutError(APIConnectionError):
    """keepmem did not answer within the timeout."""


class APIError(KeepmemError):
    """keepmem answered with an error status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        request_id: str | None = None,
        detail: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            f"{status} {code}: {message}" + (f" (request_id={request_id})" if request_id else "")
        )
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.detail = detail
        self.headers = headers or {}


class BadRequestError(APIError):
    pass


class AuthenticationError(APIError):
    pass


class PermissionDeniedError(APIError):
    pass


class NotFoundError(APIError):
    pass


class ConflictError(APIError):
    pass


class PayloadTooLargeError(APIError):
    pass


class ValidationError(APIError):
    pass


class RateLimitError(APIError):
    @property
    def retry_after(self) -> float | None:
        value = self.headers.get("retry-after")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None


class InternalServerError(APIError):
    pass


class ServiceUnavailableError(InternalServerError):
    pass


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def error_for(status: int, body: Any, headers: dict[str, str]) -> APIError:
    """The exception for an error response (keepmem's one error shape, or
    anything a proxy in between sent)."""
    body = body if isinstance(body, dict) else {}
    message = str(body.get("error") or body.get("detail") or f"HTTP {status}")
    code = str(body.get("code") or "error")
    cls = _BY_STATUS.get(status) or (InternalServerError if status >= 500 else APIError)
    return cls(status, code, message, body.get("request_id"), body.get("detail"), headers)
