"""mem0's filter language, read into a predicate over keepmem memories.

A filter is a JSON object: ``{"AND": [...]}``, ``{"OR": [...]}``,
``{"NOT": ...}`` (one condition or a list), or conditions side by side
(an implicit AND). A condition names a field with a value (equality), the
wildcard ``"*"`` (any value at all) or an operator object
(``{"in": [...]}``, ``{"gte": "2025-01-01"}``...). What cannot be honoured
is refused with a message that names it, never ignored: a filter that
quietly matched more than asked would leak one user's memories to another.

mem0's older "implicit null scoping" (a ``user_id`` filter also requiring
no agent, app or run) is not applied: a ``user_id`` filter matches every
memory of the user. ``ne`` matches a missing field too, as in mem0.

The whole filter is evaluated here, exactly (ids are case-sensitive);
:func:`pushdown` only narrows the candidates the notes domain reads with
the equalities every match must satisfy (tag matching is case-insensitive,
so it is a pre-filter, never the answer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.errors import BadRequest
from app.kit.timeutil import parse_timestamp

ENTITIES = ("user_id", "agent_id", "app_id", "run_id")
TIMES = ("created_at", "updated_at")
LOGIC = ("AND", "OR", "NOT")
ENTITY_OPS = frozenset({"eq", "ne", "in", "nin"})
TIME_OPS = frozenset({"eq", "ne", "gt", "gte", "lt", "lte"})
TEXT_OPS = frozenset({"contains", "icontains"})
REFUSED_FIELDS = {
    "categories": "keepmem memories have no categories",
    "timestamp": "filter by created_at instead (a memory's time)",
}
MAX_DEPTH = 8
MAX_CONDITIONS = 200


@dataclass(frozen=True, slots=True)
class Fields:
    """What a filter can look at in one memory."""

    id: str
    memory: str
    user_id: str | None
    agent_id: str | None
    app_id: str | None
    run_id: str | None
    metadata: Mapping[str, Any] | None
    created_at: datetime
    updated_at: datetime


Predicate = Callable[[Fields], bool]


def _refuse(message: str) -> BadRequest:
    return BadRequest(f"filters: {message}", detail=f"filters: {message}")


def _time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise _refuse(f"{where}: give an ISO-8601 date or time as text")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise _refuse(f"{where}: {value[:60]!r} is not an ISO-8601 date or time") from exc


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _refuse(f"{where}: give text")
    return value


def _texts(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _refuse(f"{where}: give a list of texts")
    return list(value)


def _ops(value: Any) -> dict[str, Any] | None:
    """An operator object, or None for a plain value."""
    return dict(value) if isinstance(value, dict) else None


def _entity(field: str, value: Any) -> Predicate:
    def get(f: Fields) -> str | None:
        held: str | None = getattr(f, field)
        return held

    if value == "*":
        return lambda f: get(f) is not None
    ops = _ops(value)
    if ops is None:
        ops = {"eq": value}
    checks: list[Predicate] = []
    for op, arg in ops.items():
        where = f"{field}.{op}"
        if op not in ENTITY_OPS:
            raise _refuse(f"{field}: operator {op!r} is not supported (use eq, ne, in, nin, '*')")
        if op in ("eq", "ne"):
            checks.append(_equal(get, _text(arg, where), op == "eq"))
        else:
            checks.append(_member(get, set(_texts(arg, where)), op == "in"))
    return _all(checks)


def _equal(get: Callable[[Fields], str | None], want: str, same: bool) -> Predicate:
    return lambda f: (get(f) == want) == same


def _member(get: Callable[[Fields], str | None], allowed: set[str], inside: bool) -> Predicate:
    return lambda f: (get(f) in allowed) == inside


def _all(checks: list[Predicate]) -> Predicate:
    return lambda f: all(c(f) for c in checks)


_COMPARE: dict[str, Callable[[datetime, datetime], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
}


def _compared(field: str, op: str, at: datetime) -> Predicate:
    compare = _COMPARE[op]

    def check(f: Fields) -> bool:
        held: datetime = getattr(f, field)
        return compare(held, at)

    return check


def _moment(field: str, value: Any) -> Predicate:
    ops = _ops(value)
    if ops is None:
        ops = {"eq": value}
    checks: list[Predicate] = []
    for op, arg in ops.items():
        if op not in TIME_OPS:
            raise _refuse(
                f"{field}: operator {op!r} is not supported (use gt, gte, lt, lte, eq, ne)"
            )
        checks.append(_compared(field, op, _time(arg, f"{field}.{op}")))
    return _all(checks)


def _contains(word: str, fold: bool) -> Predicate:
    if fold:
        folded = word.casefold()
        return lambda f: folded in f.memory.casefold()
    return lambda f: word in f.memory


def _keywords(value: Any) -> Predicate:
    ops = _ops(value)
    if ops is None or not ops:
        raise _refuse("keywords: give {'contains': ...} or {'icontains': ...}")
    checks: list[Predicate] = []
    for op, arg in ops.items():
        if op not in TEXT_OPS:
            raise _refuse(f"keywords: operator {op!r} is not supported (use contains, icontains)")
        checks.append(_contains(_text(arg, f"keywords.{op}"), op == "icontains"))
    return _all(checks)


def _metadata(value: Any) -> Predicate:
    if not isinstance(value, dict) or not value:
        raise _refuse("metadata: give an object of top-level keys and the values they must equal")
    want = dict(value)
    return lambda f: (
        f.metadata is not None
        and all(k in f.metadata and f.metadata[k] == v for k, v in want.items())
    )


def _memory_ids(value: Any) -> Predicate:
    ids = set(_texts(value, "memory_ids"))
    return lambda f: f.id in ids


def _condition(key: str, value: Any, depth: int, count: list[int]) -> Predicate:
    if key in LOGIC:
        return _logic(key, value, depth + 1, count)
    if key in ENTITIES:
        return _entity(key, value)
    if key in TIMES:
        return _moment(key, value)
    if key == "keywords":
        return _keywords(value)
    if key == "metadata":
        return _metadata(value)
    if key == "memory_ids":
        return _memory_ids(value)
    if key in REFUSED_FIELDS:
        raise _refuse(f"field {key!r} is not supported: {REFUSED_FIELDS[key]}")
    raise _refuse(
        f"field {key[:60]!r} is not supported (fields: {', '.join(ENTITIES + TIMES)}, "
        "keywords, metadata, memory_ids; logic: AND, OR, NOT)"
    )


def _object(obj: Any, depth: int, count: list[int]) -> Predicate:
    if not isinstance(obj, dict) or not obj:
        raise _refuse("each condition is a non-empty object")
    count[0] += len(obj)
    if count[0] > MAX_CONDITIONS:
        raise _refuse(f"at most {MAX_CONDITIONS} conditions")
    parts = [_condition(str(k), v, depth, count) for k, v in obj.items()]
    return lambda f: all(p(f) for p in parts)


def _logic(op: str, value: Any, depth: int, count: list[int]) -> Predicate:
    if depth > MAX_DEPTH:
        raise _refuse(f"at most {MAX_DEPTH} levels of AND / OR / NOT")
    items = value if isinstance(value, list) else [value] if op == "NOT" else None
    if not items:
        raise _refuse(f"{op} takes a non-empty list of conditions")
    parts = [_object(item, depth, count) for item in items]
    if op == "AND":
        return lambda f: all(p(f) for p in parts)
    if op == "OR":
        return lambda f: any(p(f) for p in parts)
    return lambda f: not any(p(f) for p in parts)


def compile_filter(filters: Mapping[str, Any] | None) -> Predicate:
    """The filter as a predicate (everything when there is none); a 400
    naming what is not supported."""
    if not filters:
        return lambda f: True
    return _object(dict(filters), 0, [0])


def pushdown(filters: Mapping[str, Any] | None) -> dict[str, str]:
    """Entity equalities every match must satisfy, as keepmem memory tags
    (``user``, ``agent``, ``app``, ``thread``), for narrowing the scan."""
    tags: dict[str, str] = {}
    for key, value in _conjuncts(filters or {}):
        if key in ENTITIES and isinstance(value, str) and value != "*":
            tags[TAG_OF[key]] = value
    return tags


def _conjuncts(obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in obj.items():
        if key == "AND" and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    out += _conjuncts(item)
        elif key not in LOGIC:
            out.append((key, value))
    return out


TAG_OF = {"user_id": "user", "agent_id": "agent", "app_id": "app", "run_id": "thread"}
