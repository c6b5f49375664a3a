"""One exception hierarchy; one handler renders it (see app.main).

Every error body is ``{"error": "...", "code": "...", "request_id": "..."}``;
the status and the stable ``code`` travel with the exception class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class AppError(Exception):
    """Base of every error the service reports to a client on purpose; each
    subclass carries its status and its own stable ``code``."""

    status_code: int = 500
    code: str = "internal_error"

    def __init__(
        self, message: str, *, detail: Any = None, headers: dict[str, str] | None = None
    ) -> None:
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

    def __init__(
        self,
        message: str = "missing or invalid API key",
        *,
        headers: dict[str, str] | None = None,
        refused: Any = None,
    ) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer", **(headers or {})})
        # The tenant scope of a credential that exists but was refused
        # (revoked, expired): its tenant's audit trail records the attempt.
        self.refused = refused


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


class UnsupportedMediaType(AppError):
    status_code = 415
    code = "unsupported_media_type"


class Unprocessable(AppError):
    status_code = 422
    code = "invalid"


class TooManyRequests(AppError):
    status_code = 429
    code = "rate_limited"


class NotOffered(AppError):
    """A feature of a compatible API (mem0's) that keepmem does not offer."""

    status_code = 501
    code = "not_offered"


class ServiceUnavailable(AppError):
    status_code = 503
    code = "unavailable"


# -- one class per kind of error a client can tell apart (each its own code) ---------


class NoteNotFound(NotFound):
    code = "note_not_found"


class VersionNotFound(NotFound):
    code = "version_not_found"


class PartNotFound(NotFound):
    code = "part_not_found"


class CitationNotFound(NotFound):
    code = "citation_not_found"


class TextNotKept(Conflict):
    """The work needs a note's text and its project does not keep text."""

    code = "text_not_kept"


class JobNotFound(NotFound):
    code = "job_not_found"


class TaskNotFound(NotFound):
    code = "task_not_found"


class KeyNotFound(NotFound):
    code = "key_not_found"


class TenantNotFound(NotFound):
    code = "tenant_not_found"


class EntityNotFound(NotFound):
    code = "entity_not_found"


class ProjectNotFound(NotFound):
    code = "project_not_found"


class RouteNotFound(NotFound):
    code = "route_not_found"


class MethodNotAllowed(AppError):
    status_code = 405
    code = "method_not_allowed"


class InvalidInput(BadRequest):
    """Text or numbers the service cannot store (NUL, lone surrogates, ...)."""

    code = "invalid_input"


class InvalidCursor(BadRequest):
    """Text that is no cursor (or event id) this API gave out."""

    code = "invalid_cursor"


class CursorExpired(BadRequest):
    """A well-formed cursor naming no row the caller can see: the row was
    dropped (audit retention, erasure) or is another project's or tenant's.
    The client starts again without it."""

    code = "cursor_expired"


class InvalidTarget(BadRequest):
    """An OAuth ``resource`` (RFC 8707) that is not this server."""

    code = "invalid_target"


class MissingScope(Forbidden):
    code = "missing_scope"


class ProjectLimit(Forbidden):
    code = "project_limit"


class OutsideScope(Forbidden):
    """A write reaching past the credential's tag scope (an id taken by a
    note it cannot see, or a row the database's policies refuse)."""

    code = "outside_scope"


class QuotaExceeded(Forbidden):
    """A tenant quota (notes, bytes) would be exceeded; the message names it."""

    code = "quota_exceeded"


class DailyQuotaExceeded(TooManyRequests):
    """A daily quota (requests, jobs) is used up until midnight UTC."""

    code = "quota_exceeded"


class JobNotDead(Conflict):
    code = "job_not_dead"


class ContentNotHeld(Conflict):
    code = "content_not_held"


class NotEmbeddedYet(Conflict):
    code = "not_embedded_yet"


class TenantExists(Conflict):
    code = "tenant_exists"


class DocumentUnreadable(Unprocessable):
    code = "unreadable_document"


class NotConfigured(ServiceUnavailable):
    code = "not_configured"


class ProviderUnavailable(ServiceUnavailable):
    code = "provider_unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    code = "database_unavailable"


_BY_STATUS: dict[int, type[AppError]] = {
    cls.status_code: cls
    for cls in (
        BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict,
        PayloadTooLarge, Unprocessable, TooManyRequests, ServiceUnavailable,
    )
}  # fmt: skip


def as_app_error(exc: Exception, *, allow: Callable[[], list[str]]) -> AppError:
    """A framework HTTP error (no route, wrong method, unreadable body, or the
    input checks' refusal) as the AppError it stands for."""
    status = int(getattr(exc, "status_code", 500))
    detail = getattr(exc, "detail", None)
    message = str(detail) if detail else "error"
    if getattr(exc, "code", None) == InvalidInput.code:
        return InvalidInput(message)
    if status == 404:
        return RouteNotFound("no such route")
    if status == 405:
        return MethodNotAllowed("method not allowed", headers={"Allow": ", ".join(allow())})
    cls = _BY_STATUS.get(status)
    if cls is None:
        error = AppError(message)
        error.status_code = status
        return error
    return cls(message, headers=dict(getattr(exc, "headers", None) or {}))
