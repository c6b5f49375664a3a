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
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, f"{where}.{key[:40]!r}")
            _walk(item, f"{where}.{key[:40]}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{where}[{i}]")


def loads(raw: bytes | str) -> Any:
    """Strict JSON: finite numbers, 64-bit integers, storable text.

    Raises :class:`InputRefused` for storable-JSON violations and
    :class:`json.JSONDecodeError` for malformed JSON (both become a 422).
    """
    doc = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        value = json.loads(doc, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise InputRefused("JSON is nested too deeply") from None
    _walk(value, "body")
    return value
