"""Text and numbers PostgreSQL can store: the checks behind every input door.

Pure functions (no web framework): :mod:`app.wire` applies them to every
request; services apply them to what they decode themselves (cursors).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# Largest offset or token budget a query parameter takes (fits PostgreSQL's
# int4; cursors page further). Every integer parameter states a maximum.
MAX_OFFSET = 1_000_000_000

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")

# Deepest nesting of arrays and objects a JSON input may have: far above any
# real document (a note with tags is three levels), far below what would
# exhaust the stack of the code reading it (RecursionError was a 500).
MAX_JSON_DEPTH = 64
_TOO_DEEP = f"JSON is nested too deeply (at most {MAX_JSON_DEPTH} levels of arrays and objects)"


def json_integer(value: Any) -> Any:
    """For a strict integer field: JSON's integral numbers (``5``, ``5.0``,
    ``1e3``) as int; strings and booleans stay as they are (and are refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class InputRefused(ValueError):
    """A value the service cannot store; the message says which and why."""


def check_text(value: str, where: str) -> None:
    """Refuse NUL and lone surrogates (valid pairs arrive joined by the JSON decoder)."""
    bad = _BAD_TEXT.search(value)
    if bad is None:
        return
    if bad.group() == "\x00":
        raise InputRefused(f"{where}: text may not contain NUL (\\u0000) characters")
    raise InputRefused(
        f"{where}: text may not contain a lone UTF-16 surrogate "
        f"(\\u{ord(bad.group()):04x}); send valid Unicode"
    )


def _int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > 19 or not INT64_MIN <= (value := int(text)) <= INT64_MAX:
        raise InputRefused(f"integer {text[:24]}{'…' if len(text) > 24 else ''} is out of range")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputRefused(f"number {text[:24]} is out of range")
    return value


def _constant(name: str) -> float:
    raise InputRefused(f"{name} is not a JSON number")


def _walk(value: Any, where: str) -> None:
    """Check every string and key, and the nesting depth (without recursion:
    a deep document must not exhaust the stack of what reads it after)."""
    pending: list[tuple[Any, str, int]] = [(value, where, 0)]
    while pending:
        item, at, depth = pending.pop()
        if isinstance(item, str):
            check_text(item, at)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth >= MAX_JSON_DEPTH:
            raise InputRefused(f"{where}: {_TOO_DEEP}")
        if isinstance(item, dict):
            for key, child in reversed(item.items()):
                check_text(key, f"{at}.{key[:40]!r}")
                pending.append((child, f"{at}.{key[:40]}", depth + 1))
        else:
            for i in range(len(item) - 1, -1, -1):
                pending.append((item[i], f"{at}[{i}]", depth + 1))


def loads(raw: bytes | str, *, where: str = "body") -> Any:
    """The one JSON decoder of request input (bodies, JSON-carrying form
    fields and query values, cursors): finite numbers, 64-bit integers,
    storable text, at most :data:`MAX_JSON_DEPTH` levels of nesting.

    Raises :class:`InputRefused` for storable-JSON violations (too deep
    included) and :class:`json.JSONDecodeError` for malformed JSON; both are
    ``ValueError``. ``where`` names the input in refusals.
    """
    doc = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        value = json.loads(doc, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise InputRefused(f"{where}: {_TOO_DEEP}") from None
    _walk(value, where)
    return value
