"""Tag rules (KEEP_PROTOCOL §6.5).

Keys match ``^[a-zA-Z_][a-zA-Z0-9_-]*$``, at most 128 characters, and are
case-folded; values are strings (or lists of strings) of at most 4096
characters, at most 512 distinct values per key, stored as a scalar when
there is one. Keys starting with ``_`` are system tags: the server sets them
and strips them from user input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

TagValue = str | list[str]
TagMap = dict[str, TagValue]

MAX_KEY_LENGTH = 128
MAX_VALUE_LENGTH = 4096
MAX_VALUES_PER_KEY = 512
MAX_KEYS = 256
SYSTEM_PREFIX = "_"

_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]*$")


class InvalidTags(ValueError):
    """A tag map that breaks the rules; the message names the key."""


def validate_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise InvalidTags(
            f"invalid tag key {key!r}: must start with a letter or '_' and contain only "
            "letters, digits, '_' and '-'"
        )
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidTags(f"tag key {key[:40]!r}... is longer than {MAX_KEY_LENGTH} characters")
    return key.casefold()


def values_of(raw: Any, key: str = "?") -> list[str]:
    """A tag value (scalar or list) as a de-duplicated list of stripped strings."""
    if raw is None:
        return []
    items: Iterable[Any] = raw if isinstance(raw, list | tuple) else [raw]
    out: list[str] = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, dict | list | tuple):
            raise InvalidTags(f"tag {key!r}: values must be strings or lists of strings")
        value = (str(item).lower() if isinstance(item, bool) else str(item)).strip()
        if len(value) > MAX_VALUE_LENGTH:
            raise InvalidTags(f"tag {key!r}: value longer than {MAX_VALUE_LENGTH} characters")
        if value not in out:
            out.append(value)
    if len(out) > MAX_VALUES_PER_KEY:
        raise InvalidTags(f"tag {key!r}: more than {MAX_VALUES_PER_KEY} distinct values")
    return out


def pack(values: list[str]) -> TagValue | None:
    if not values:
        return None
    return values[0] if len(values) == 1 else list(values)


def user_tag_changes(raw: Mapping[str, Any] | None) -> tuple[set[str], dict[str, list[str]]]:
    """Split user tag input into keys to delete (value ``""``) and values to add.

    ``_``-prefixed keys are dropped: system tags are the server's.
    """
    deletes: set[str] = set()
    adds: dict[str, list[str]] = {}
    if not raw:
        return deletes, adds
    if not isinstance(raw, Mapping):
        raise InvalidTags("tags must be an object of key -> value or list of values")
    for raw_key, raw_value in raw.items():
        if isinstance(raw_key, str) and raw_key.startswith(SYSTEM_PREFIX):
            continue
        key = validate_key(raw_key)
        values = values_of(raw_value, key)
        if "" in values:
            deletes.add(key)
            adds.pop(key, None)
            continue
        if values and key not in deletes:
            merged = adds.setdefault(key, [])
            merged.extend(v for v in values if v not in merged)
            if len(merged) > MAX_VALUES_PER_KEY:
                raise InvalidTags(f"tag {key!r}: more than {MAX_VALUES_PER_KEY} distinct values")
    return deletes, adds


def apply_changes(
    base: Mapping[str, Any],
    *,
    add: Mapping[str, list[str]] | None = None,
    remove_keys: Iterable[str] = (),
    remove_values: Mapping[str, list[str]] | None = None,
) -> TagMap:
    """Apply removals then additive merges to the user tags of ``base``."""
    merged: TagMap = {k: v for k, v in base.items() if not k.startswith(SYSTEM_PREFIX)}
    for key in remove_keys:
        merged.pop(key, None)
    for key, drop in (remove_values or {}).items():
        kept = [v for v in values_of(merged.get(key), key) if v not in set(drop)]
        packed = pack(kept)
        if packed is None:
            merged.pop(key, None)
        else:
            merged[key] = packed
    for key, values in (add or {}).items():
        current = values_of(merged.get(key), key)
        current.extend(v for v in values if v not in current)
        if len(current) > MAX_VALUES_PER_KEY:
            raise InvalidTags(f"tag {key!r}: more than {MAX_VALUES_PER_KEY} distinct values")
        packed = pack(current)
        if packed is not None:
            merged[key] = packed
    if len(merged) > MAX_KEYS:
        raise InvalidTags(f"a note may carry at most {MAX_KEYS} tag keys")
    return merged


def parse_key_list(raw: Iterable[Any] | None) -> set[str]:
    """Keys named for removal; system keys are silently ignored."""
    out: set[str] = set()
    for key in raw or ():
        if isinstance(key, str) and key.startswith(SYSTEM_PREFIX):
            continue
        out.add(validate_key(key))
    return out


def parse_value_map(raw: Mapping[str, Any] | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for raw_key, raw_value in (raw or {}).items():
        if isinstance(raw_key, str) and raw_key.startswith(SYSTEM_PREFIX):
            continue
        key = validate_key(raw_key)
        out[key] = values_of(raw_value, key)
    return out


def index_terms(tags: Mapping[str, Any]) -> list[str]:
    """``key`` and ``key=value`` (case-folded) for every user tag, for the GIN index."""
    terms: list[str] = []
    for key, value in tags.items():
        if key.startswith(SYSTEM_PREFIX):
            continue
        terms.append(key)
        terms.extend(f"{key}={v.casefold()}" for v in values_of(value, key))
    return terms


def filter_terms(tags: Mapping[str, Any] | None, keys: Iterable[str] | None = None) -> list[str]:
    """Index terms a note must hold to match a tag filter (AND across everything)."""
    terms: list[str] = []
    for raw_key, raw_value in (tags or {}).items():
        key = validate_key(raw_key)
        values = [v for v in values_of(raw_value, key) if v != ""]
        if values:
            terms.extend(f"{key}={v.casefold()}" for v in values)
        else:
            terms.append(key)
    terms.extend(validate_key(k) for k in keys or ())
    return terms


def matches(tags: Mapping[str, Any], wanted: Mapping[str, list[str]]) -> bool:
    """True when ``tags`` holds every wanted value of every wanted key."""
    for key, values in wanted.items():
        have = {v.casefold() for v in values_of(tags.get(key), key)}
        if not {v.casefold() for v in values} <= have:
            return False
    return True


def scope_terms(tags: Mapping[str, Any]) -> list[str]:
    """A credential's tag scope (``{"user": "alice"}``) as the ``key=value``
    terms every note it sees must hold; each key needs exactly one non-empty
    value, and system keys are not allowed."""
    terms: list[str] = []
    for raw_key, raw_value in tags.items():
        key = validate_key(raw_key)
        if key.startswith(SYSTEM_PREFIX):
            raise InvalidTags(f"tag scope {key!r}: system tags cannot scope a credential")
        values = [v for v in values_of(raw_value, key) if v != ""]
        if len(values) != 1:
            raise InvalidTags(f"tag scope {key!r}: give exactly one non-empty value")
        terms.append(f"{key}={values[0].casefold()}")
    return sorted(set(terms))


def terms_as_tags(terms: Iterable[str]) -> dict[str, str]:
    """``key=value`` terms back as a tag map (for showing a credential)."""
    return dict(term.split("=", 1) for term in terms)


def stamp(tags: Mapping[str, Any], terms: Iterable[str]) -> dict[str, Any]:
    """``tags`` as a tag-scoped credential writes them: each scoped key holds
    exactly the scope's value, whatever was asked (a scoped writer can neither
    drop its scope nor place a note in another's)."""
    out = dict(tags)
    for term in terms:
        key, value = term.split("=", 1)
        out[key] = value
    return out
