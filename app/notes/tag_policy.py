"""Tag rules a project declares in its ``.tag/<key>`` notes (keep's tag
docs), applied to every write of user tags.

keep keeps a tag's behaviour as data: the system tags of the note
``.tag/<key>`` say how ``key`` behaves, and the notes ``.tag/<key>/<value>``
are the values a constrained tag allows. For each key a write gives values:

- ``_singular: "true"``: the write replaces the key's values (put and tag
  alike), and one write may give it one value only;
- ``_constrained: "true"``: each value needs its ``.tag/<key>/<value>``
  note; the refusal names the allowed values;
- ``_value_regex``: each value must match the whole pattern (for an edge
  tag, the note id the value names);
- ``_requires: <other>``: the two rules above apply only when ``<other>``
  is on the note or in the write (``status`` means something only with an
  ``act``);
- ``_inverse: <verb>``: the key is an edge tag (``app.notes.edges``).

A ``""`` value removes a key and is never checked; a key without a
``.tag/<key>`` note has no rules (a project may delete one). keep's rules,
re-implemented here (keep's code is read, never imported).

The rules are read with one statement per project and kept for
``CACHE_SECONDS`` in this process, so a write pays one small query at most
and usually none; a write or delete of a ``.tag/`` note in this process
drops them at once (the change feed tells), other processes within the TTL
(as may this one, for a read racing the change's commit).

The five flags are system tags, which user tag input is stripped of; on a
``.tag/<key>`` note a write-scoped key may set them (and remove them with
``""`` or ``remove``), checked here so a project cannot store a rule that
cannot be applied.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2
from sqlalchemy.ext.asyncio import AsyncSession

from app.caches import LRU
from app.errors import BadRequest
from app.kit import tags as tagrules
from app.kit.ids import is_system_id
from app.notes.edges import edge_target
from app.notes.repository import changes as feed
from app.notes.repository import tagdocs
from app.tenancy import Scope

PREFIX = tagdocs.PREFIX
SINGULAR, CONSTRAINED, VALUE_REGEX = "_singular", "_constrained", "_value_regex"
INVERSE, REQUIRES = "_inverse", "_requires"
FLAGS = (SINGULAR, CONSTRAINED, VALUE_REGEX, INVERSE, REQUIRES)
BOOLEAN_FLAGS = (SINGULAR, CONSTRAINED)
KEY_FLAGS = (INVERSE, REQUIRES)  # their value is a tag key
MAX_PATTERN = 256
CACHE_SECONDS = 5.0

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is the writer's 400, not a log line


class TagRuleBroken(BadRequest):
    """A write the project's tag rules refuse, or a tag rule that cannot be stored."""

    code = "tag_rule"


@dataclass(frozen=True, slots=True)
class Rule:
    """What ``.tag/<key>`` (and its value notes) say about ``key``."""

    key: str
    singular: bool = False
    constrained: bool = False
    values: tuple[str, ...] = ()  # the values with a .tag/<key>/<value> note, sorted
    value_regex: str | None = None
    inverse: str | None = None
    requires: str | None = None
    #: Why the doc's rules cannot be applied (a doc stored before flags were
    #: checked at write): writes giving the key values are refused until it is fixed.
    problem: str | None = None

    def admit(self, value: str) -> None:
        """Refuse a value the constraint or the pattern does not allow."""
        if self.constrained and value not in self.values:
            allowed = ", ".join(self.values) or "none yet"
            raise TagRuleBroken(
                f"tag {self.key!r} is constrained: {value!r} is not one of its values "
                f"(allowed: {allowed}; a value needs a note {PREFIX}{self.key}/<value>)"
            )
        if self.value_regex is None:
            return
        checked = value
        if self.inverse:
            target = edge_target(value)
            if target is None or is_system_id(target):
                raise TagRuleBroken(f"tag {self.key!r}: {value!r} names no note to link to")
            checked = target
        if _compiled(self.value_regex).fullmatch(checked) is None:
            raise TagRuleBroken(
                f"tag {self.key!r}: {checked!r} does not match the pattern "
                f"{self.value_regex!r} of {PREFIX}{self.key}"
            )


@dataclass(frozen=True, slots=True)
class Policy:
    """A project's tag rules, by key."""

    rules: Mapping[str, Rule] = field(default_factory=dict)


NO_RULES = Policy()


def doc_key(note_id: str) -> str | None:
    """The key a note declares rules for: ``key`` for ``.tag/<key>``, None
    for value notes (``.tag/<key>/<value>``) and every other note."""
    if not note_id.startswith(PREFIX):
        return None
    key = note_id[len(PREFIX) :]
    try:
        return key if "/" not in key and tagrules.validate_key(key) == key else None
    except tagrules.InvalidTags:
        return None


# -- reading the rules ---------------------------------------------------------------------


def _flag(tags: Mapping[str, Any], name: str) -> str | None:
    value = tags.get(name)
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    text = str(value).strip() if value is not None else ""
    return text or None


def _rule(key: str, tags: Mapping[str, Any], values: Iterable[str]) -> Rule:
    regex = _flag(tags, VALUE_REGEX)
    constrained = _flag(tags, CONSTRAINED) == "true"
    problem = None
    if constrained and regex is not None:
        problem = f"it declares both {CONSTRAINED} and {VALUE_REGEX}"
    elif regex is not None:
        problem = _pattern_problem(regex)
    return Rule(
        key=key,
        singular=_flag(tags, SINGULAR) == "true",
        constrained=constrained,
        values=tuple(sorted(values)),
        value_regex=regex if problem is None else None,
        inverse=_flag(tags, INVERSE),
        requires=_flag(tags, REQUIRES),
        problem=problem,
    )


def parse(docs: Mapping[str, Mapping[str, Any]]) -> Policy:
    """The rules of a project's ``.tag/...`` notes ({note id: tags})."""
    values: dict[str, list[str]] = {}
    for note_id in docs:
        key, sep, value = note_id[len(PREFIX) :].partition("/")
        if sep and value and "/" not in value:
            values.setdefault(key, []).append(value)
    rules = {}
    for note_id, tags in docs.items():
        declared = doc_key(note_id)
        if declared is not None:
            rules[declared] = _rule(declared, tags, values.get(declared, ()))
    return Policy(rules=rules)


_cache: LRU[tuple[uuid.UUID, uuid.UUID], Policy] = LRU(10_000, ttl=CACHE_SECONDS)
# keep's storage backend may run several event loops in threads of one process
_lock = threading.Lock()
_forgotten = [0]  # drops so far: rules read while one happened are not kept


def _dropped(scope: Scope, note_ids: Sequence[str]) -> None:
    if any(n.startswith(PREFIX) for n in note_ids):
        forget(scope)


feed.on_record(_dropped)


def forget(scope: Scope) -> None:
    """Drop the project's cached rules (its tag docs changed)."""
    key = (scope.tenant_id, scope.project_id)
    with _lock:
        _forgotten[0] += 1
        _cache.drop(lambda k: k == key)


async def load(session: AsyncSession, scope: Scope) -> Policy:
    """The project's rules: cached, or read in one statement."""
    key = (scope.tenant_id, scope.project_id)
    with _lock:
        cached, drops = _cache.get(key), _forgotten[0]
    if cached is None:
        cached = parse(await tagdocs.tag_docs(session, scope))
        with _lock:
            if drops == _forgotten[0]:
                _cache.put(key, cached)
    return cached


async def rules(session: AsyncSession, scope: Scope) -> list[Rule]:
    """Every ``.tag/<key>`` note's rules, by key."""
    policy = await load(session, scope)
    return [policy.rules[k] for k in sorted(policy.rules)]


# -- applying them -------------------------------------------------------------------------


def check(
    policy: Policy, *, adds: Mapping[str, Sequence[str]], existing: Mapping[str, Any]
) -> set[str]:
    """Refuse a write whose values break the rules (``TagRuleBroken``);
    returns the singular keys it names, whose values it replaces.
    ``existing``: the note's user tags before the write (for ``_requires``)."""
    replaced: set[str] = set()
    for key, values in adds.items():
        rule = policy.rules.get(key)
        if rule is None or not values:
            continue
        if rule.problem is not None:
            raise TagRuleBroken(
                f"tag {key!r} cannot be written: the rules of {PREFIX}{key} cannot be applied "
                f"({rule.problem}); fix that note first"
            )
        if rule.singular:
            if len(values) > 1:
                raise TagRuleBroken(
                    f"tag {key!r} is singular (one value at a time), "
                    f"but the write gives {len(values)}: {list(values)!r}"
                )
            replaced.add(key)
        if rule.requires and rule.requires not in adds and rule.requires not in existing:
            continue
        for value in values:
            rule.admit(value)
    return replaced


async def admit(
    session: AsyncSession,
    scope: Scope,
    *,
    adds: Mapping[str, Sequence[str]],
    existing: Mapping[str, Any],
) -> set[str]:
    """``check`` against the project's rules; a write without values reads none."""
    if not any(adds.values()):
        return set()
    return check(await load(session, scope), adds=adds, existing=existing)


async def policy_for(
    session: AsyncSession, scope: Scope, adds: Iterable[Mapping[str, Sequence[str]]]
) -> Policy:
    """The rules, read only when one of the writes gives values."""
    if any(any(a.values()) for a in adds):
        return await load(session, scope)
    return NO_RULES


def check_record(policy: Policy, *, new: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    """Check a whole tag map replacing ``old`` (what keep's storage backend
    and imports write): the values it adds obey the rules, and a singular key
    it changes ends with one value. Values already there are not checked
    again (they obeyed the rules of their day)."""
    adds: dict[str, list[str]] = {}
    final: dict[str, list[str]] = {}
    for key, raw in new.items():
        if key.startswith(tagrules.SYSTEM_PREFIX):
            continue
        values = tagrules.values_of(raw, key)
        before = set(tagrules.values_of(old.get(key), key))
        added = [v for v in values if v not in before]
        if added:
            adds[key], final[key] = added, values
    for key in check(policy, adds=adds, existing=old):
        if len(final[key]) > 1:
            raise TagRuleBroken(
                f"tag {key!r} is singular (one value at a time), but it would hold "
                f"{len(final[key])}: {final[key]!r}"
            )


# -- the flags a .tag/<key> note carries ---------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    """The pattern for RE2, which matches in time linear in the value: a
    pattern a project writes cannot stall a server (Python's re backtracks,
    and (a|a)*b on 30 characters takes minutes)."""
    return re2.compile(pattern, options=_RE2_OPTIONS)


def _pattern_problem(pattern: str) -> str | None:
    if len(pattern) > MAX_PATTERN:
        return f"{VALUE_REGEX} is longer than {MAX_PATTERN} characters"
    try:
        _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args else str(exc)
        return (
            f"{VALUE_REGEX} {pattern!r} is not a regular expression RE2 runs: {reason} "
            "(backreferences and lookarounds are not supported)"
        )
    return None


def _flag_value(name: str, raw: Any) -> str:
    """A flag's value as stored, or ``TagRuleBroken`` saying what is wrong."""
    try:
        values = tagrules.values_of(raw, name)
    except tagrules.InvalidTags as exc:
        raise TagRuleBroken(f"invalid {name}: {exc}") from exc
    if len(values) != 1:
        raise TagRuleBroken(f"{name} takes one value, not {len(values)}")
    value = values[0]
    if value == "":
        return value
    if name in BOOLEAN_FLAGS and value not in ("true", "false"):
        raise TagRuleBroken(f'{name} is "true" or "false", not {value!r}')
    if name in KEY_FLAGS:
        try:
            key = tagrules.validate_key(value)
        except tagrules.InvalidTags as exc:
            raise TagRuleBroken(f"{name} must name a tag key: {exc}") from exc
        if key.startswith(tagrules.SYSTEM_PREFIX):
            raise TagRuleBroken(f"{name} must name a user tag key, not the system key {key!r}")
        return key
    if name == VALUE_REGEX:
        problem = _pattern_problem(value)
        if problem is not None:
            raise TagRuleBroken(problem)
    return value


@dataclass(frozen=True, slots=True)
class FlagChanges:
    """The flags a write sets on a ``.tag/<key>`` note, and those it removes."""

    set: Mapping[str, str] = field(default_factory=dict)
    remove: frozenset[str] = frozenset()

    def apply(self, system: Mapping[str, Any]) -> dict[str, Any]:
        """``system`` (the note's system tags) with the changes made."""
        out = {k: v for k, v in system.items() if k not in self.remove}
        out.update(self.set)
        return out

    def __bool__(self) -> bool:
        return bool(self.set or self.remove)


NO_CHANGES = FlagChanges()


def flag_changes(
    note_id: str, raw: Mapping[str, Any] | None, remove: Iterable[Any] | None = None
) -> FlagChanges:
    """The flag changes of a write's tag input (``raw``, and the keys it
    ``remove``s): only a ``.tag/<key>`` note takes flags; every other note
    (and every other system key) is stripped of them as before."""
    if doc_key(note_id) is None:
        return NO_CHANGES
    sets: dict[str, str] = {}
    removed = {k for k in remove or () if k in FLAGS}
    for name, value in (raw or {}).items():
        if name not in FLAGS:
            continue
        checked = _flag_value(name, value)
        if checked == "":
            removed.add(name)
            sets.pop(name, None)
        else:
            sets[name] = checked
            removed.discard(name)
    changes = FlagChanges(set=sets, remove=frozenset(removed))
    check_flags(note_id, changes.apply({}))
    return changes


def flags_of(tags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags among a note's tags."""
    return {k: v for k, v in tags.items() if k in FLAGS}


def check_flags(note_id: str, flags: Mapping[str, Any]) -> None:
    """Refuse flags that together make a rule no write could obey."""
    if doc_key(note_id) is None:
        return
    if _flag(flags, CONSTRAINED) == "true" and _flag(flags, VALUE_REGEX) is not None:
        raise TagRuleBroken(
            f"{note_id} cannot declare both {CONSTRAINED}: true and {VALUE_REGEX}: "
            f"a constrained tag's values are its {note_id}/<value> notes"
        )


def check_stored_flags(note_id: str, tags: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    """Check the flags of a whole tag map replacing ``old`` (keep's backend,
    imports): each flag that changes is valid, and the set is coherent."""
    if doc_key(note_id) is None:
        return
    new_flags, old_flags = flags_of(tags), flags_of(old)
    if new_flags == old_flags:
        return
    for name, value in new_flags.items():
        if old_flags.get(name) != value:
            _flag_value(name, value)
    check_flags(note_id, new_flags)
