"""One exception hierarchy; one handler renders it (see app.main).

Every error body is ``{"error": "...", "code": "...", "request_id": "..."}``;
the status and the stable ``code`` travel with the exception class.
"""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    """Base of every error the service reports to a client on purpose."""

    status_code: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, detail: Any = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.headers = headers or {}


class BadRequest(AppError):
    status_code = 400
    code = "bad_request"


class Unauthorized(AppError):
    status_code = 401
    code = "unauthorized"

    def __init__(self, message: str = "missing or invalid API key") -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(AppError):
    status_code = 403
    code = "forbidden"


class NotFound(AppError):
    status_code = 404
    code = "not_found"


class Conflict(AppError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(AppError):
    status_code = 413
    code = "payload_too_large"


class Unprocessable(AppError):
    status_code = 422
    code = "invalid"


class TooManyRequests(AppError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message, headers=headers)


class ServiceUnavailable(AppError):
    status_code = 503
    code = "unavailable"
