"""Dynamic client registration's input (RFC 7591): the metadata checked
before a client is stored, refusals in RFC 7591 §3.2.2's error shape.

``/oauth/register`` is open to anyone (MCP clients register themselves), so
what it stores is bounded: the body (64 KiB, 413 above), every member's
type and length (:class:`app.oauth.schemas.ClientMetadata`), and how many
clients that never completed a grant are kept (the oldest are pruned,
``KEEPMEM_OAUTH_MAX_UNUSED_CLIENTS``); a per-address rate limit
(``KEEPMEM_OAUTH_REGISTRATIONS_PER_MINUTE``) keeps one caller from churning.
"""

from __future__ import annotations

from typing import Any

from authlib.oauth2.rfc6749.errors import OAuth2Error
from authlib.oauth2.rfc7591.errors import InvalidClientMetadataError, InvalidRedirectURIError
from pydantic import ValidationError

from app.oauth.schemas import ClientMetadata

# Above the largest metadata ClientMetadata admits (about 32 KiB of URIs and
# contacts), so a refusal names the member at fault rather than the size; a
# deeply nested document that fits is refused by the decoder (400).
MAX_BODY_BYTES = 64 * 1024


def error_text(text: str) -> str:
    """``error_description`` may hold printable ASCII but ``"`` and ``\\``
    (RFC 6749 §5.2); anything else becomes ``?``."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in text)[:400]


def unreadable(reason: str) -> OAuth2Error:
    """A body that is not a JSON object (or not JSON at all)."""
    return InvalidClientMetadataError(
        error_text(f"the registration request must be a JSON object: {reason}")
    )


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def check(body: Any) -> dict[str, Any]:
    """The metadata to register (defaults filled in, unknown members
    dropped); refusals name the member: ``invalid_redirect_uri`` for a
    redirect URI, ``invalid_client_metadata`` for anything else."""
    if not isinstance(body, dict):
        raise unreadable(f"got {type(body).__name__}")
    try:
        metadata = ClientMetadata.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = _where(tuple(first["loc"]))
        message = error_text(f"{where}: {first['msg']}")
        if first["loc"] and first["loc"][0] == "redirect_uris" and len(first["loc"]) > 1:
            raise InvalidRedirectURIError(message) from None
        raise InvalidClientMetadataError(message) from None
    return metadata.model_dump(exclude_none=True)
