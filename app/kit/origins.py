"""Web origins as a project's ``cors_origins`` setting names them: the one
parser and comparison (``app.cors`` answers browsers with them, the project
settings check what an admin writes).

An origin is ``scheme://host[:port]`` with http or https, compared with its
scheme and host in lower case and a default port dropped; ``*`` allows any
origin (credentials are never allowed, with it or without it)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from app.errors import BadRequest

SETTING = "cors_origins"
ANY = "*"
MAX_ORIGINS = 50
# Stated in the settings' schema; ports and case are checked by ``origin``.
ORIGIN_PATTERN = r"^(\*|[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9.-]+(:[0-9]{1,5})?)$"


def origin(value: str) -> str:
    """``value`` as an origin keepmem compares (scheme and host lower case,
    a default port dropped), or ``*``; BadRequest says what is wrong."""
    given = value.strip()
    if given == ANY:
        return ANY
    if not re.match(ORIGIN_PATTERN, given):
        raise BadRequest(
            f"{value!r} is not an origin: give scheme://host[:port] (http or https, "
            "no path), or * for any origin"
        )
    parts = urlsplit(given)
    try:
        port = parts.port
    except ValueError:
        raise BadRequest(f"{value!r} has a port outside 1-65535") from None
    if port == 0 or not parts.hostname or ".." in parts.hostname:
        raise BadRequest(f"{value!r} is not an origin: its host or port is not valid")
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}[scheme]
    host = parts.hostname.lower()
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def origins(values: list[str]) -> list[str]:
    """A project's list, each checked and said once, in the order given."""
    out = list(dict.fromkeys(origin(v) for v in values))
    if len(out) > MAX_ORIGINS:
        raise BadRequest(f"at most {MAX_ORIGINS} origins per project")
    return out


def allows(allowed: list[str] | set[str] | frozenset[str], given: str) -> bool:
    return ANY in allowed or given in allowed


def listed(doc: dict[str, Any]) -> list[str]:
    """The origins a project's settings document allows."""
    value = doc.get(SETTING)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
