"""The one door for request input: text and numbers PostgreSQL can store.

Every route is a :class:`CheckedRoute`. Before FastAPI validates a request
against its schema, the route checks everything a client can send as free
text or as a number:

* text (JSON string values and keys, query values, path segments, form
  fields) must not hold NUL (PostgreSQL text cannot) or a lone UTF-16
  surrogate (it has no UTF-8 form);
* JSON numbers must be finite and integers must fit in 64 bits (``1e400``,
  ``NaN`` and ``2**64`` are refused, not turned into infinities or overflow
  errors deep in the database driver);
* JSON may nest at most 64 levels (:func:`loads`, the one decoder).

A refusal is a 400 (code ``invalid_input``) in the one error shape, naming
the field. Routers build
with :func:`api_router` so no route can skip this door (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException

from app.errors import InvalidInput
from app.kit import storable
from app.kit.storable import MAX_OFFSET, InputRefused, check_text

__all__ = [
    "ERROR_RESPONSES",
    "MAX_OFFSET",
    "CheckedRoute",
    "DateTimeText",
    "ErrorOut",
    "api_router",
    "loads",
    "not_text",
]


def not_text(value: Any) -> Any:
    """For a ``field_validator(..., mode="before")`` of an integer field: a
    JSON integer, 5 or 5.0 (as JSON Schema says), never "5" or true."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON number, not text or a boolean")
    return value


#: An ISO-8601 date-time kept as text in the schema and parsed by the route,
#: whose 400 names the field (pydantic would read a number as a Unix time).
DateTimeText = Annotated[str, Field(max_length=64, json_schema_extra={"format": "date-time"})]


class RefusedInput(HTTPException):
    """400 (code ``invalid_input``) for input the checks refuse: well-formed
    by the schema, but not storable. An HTTP exception so that FastAPI passes
    it through unchanged from inside its body parsing (anything else raised
    there becomes a generic 400 without the reason)."""

    code = InvalidInput.code

    def __init__(self, message: str) -> None:
        super().__init__(status_code=400, detail=message)


def _check_url(request: Request) -> None:
    raw_path: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    check_text(unquote(raw_path.decode("latin-1")), "path")
    for key, value in request.query_params.multi_items():
        check_text(key, "query")
        check_text(value, f"query.{key[:40]}")


def loads(raw: bytes | str, *, where: str = "body") -> Any:
    """The one JSON decoder of request input: every JSON body (FastAPI's body
    parsing reads :meth:`CheckedRequest.json`), every JSON-carrying form field
    or query value, and any route reading its own body. Strict JSON, at most
    ``storable.MAX_JSON_DEPTH`` levels deep (see
    :func:`app.kit.storable.loads`); a refusal is a 400 (``invalid_input``),
    malformed JSON a ``json.JSONDecodeError`` for the caller to word."""
    try:
        return storable.loads(raw, where=where)
    except InputRefused as exc:
        raise RefusedInput(str(exc)) from None


class CheckedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json

    async def _get_form(self, **kwargs: Any) -> FormData:
        form = await super()._get_form(**kwargs)
        try:
            for key, value in form.multi_items():
                if isinstance(value, str):
                    check_text(key, "form")
                    check_text(value, f"form.{key[:40]}")
        except InputRefused as exc:
            raise RefusedInput(str(exc)) from None
        return form


class CheckedRoute(APIRoute):
    """An APIRoute whose requests pass the checks above first."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            try:
                _check_url(request)
            except InputRefused as exc:
                raise RefusedInput(str(exc)) from None
            return await handler(CheckedRequest(request.scope, request.receive))

        return checked


class ErrorOut(BaseModel):
    """Every error the API answers, whatever its status."""

    error: str = Field(description="What went wrong, for a person.")
    code: str = Field(description="Stable machine-readable code, e.g. note_not_found.")
    request_id: str = Field(description="Also in the X-Request-ID header; quote it in reports.")
    detail: Any = Field(default=None, description="Validation errors, per field (422).")


_ERRORS = {
    400: "Bad request: a value breaks a rule the message names.",
    401: "Missing or invalid credentials.",
    403: "The key lacks the scope this needs, or a quota is reached.",
    404: "No such note, job, key or route in this tenant and project.",
    409: "Conflicts with the current state (e.g. retrying a job that is not dead).",
    413: "The body or a field is larger than the service accepts.",
    422: "The request does not match the schema, or holds text or numbers that "
    "cannot be stored (NUL, lone surrogates, non-finite or 64-bit-overflowing numbers).",
    429: "Rate limited: see Retry-After and the X-RateLimit-* headers.",
    503: "A dependency is unavailable (database, model provider); retry after Retry-After.",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text} for status, text in _ERRORS.items()
}


def api_router(
    *, responses: dict[int | str, dict[str, Any]] | None = None, **kwargs: Any
) -> APIRouter:
    """Every router of the service: routes pass through :class:`CheckedRoute`
    and document every error status in the one error shape (``responses``
    may restate some, for protocols with an error shape of their own)."""
    return APIRouter(
        route_class=CheckedRoute, responses={**ERROR_RESPONSES, **(responses or {})}, **kwargs
    )
