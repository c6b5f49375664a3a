"""keep's state-doc language: parsing, predicates, templates and fragments.

A state doc (a ``.state/<name>`` note, also ``.meta/<name>``) is YAML::

    match: sequence | all
    rules:
      - id: search            # the rule's output is bound under this name
        when: "<CEL predicate>"
        do: find | .state/<sub-flow>
        with: {query: "{params.query}", limit: 5}
        then: query-resolve | {state: query-branch, with: {...}}
        return: done | {status: stopped, with: {reason: budget}}
    post: [...]               # match: all only, evaluated after every rule

``when`` predicates are CEL, run by the same evaluator keep uses
(common-expression-language): a predicate that fails to evaluate (a missing
key, a type mismatch) is false, as keep has it. ``{a.b}`` templates read
the bindings; a string that is one whole template keeps the value's type.

A fragment (``.state/<name>/<fragment>``) adds rules to its base doc at
``order: before | after | before:<rule id> | after:<rule id>``; a fragment
tagged ``active: "false"`` is skipped. This module is pure: loading the
notes and running actions belong to :mod:`app.flows.runtime`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import cel
import yaml

log = logging.getLogger("keepmem.flows")

_TEMPLATE = re.compile(r"\{([^{}]+)\}")


class StateDocError(ValueError):
    """A state doc that cannot be parsed or compiled; the message says where."""


@dataclass(frozen=True, slots=True)
class Rule:
    id: str | None = None
    when: str = ""
    do: str | None = None
    params: Mapping[str, Any] | None = None
    then: str | Mapping[str, Any] | None = None
    returns: str | None = None
    returns_with: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StateDoc:
    name: str
    match: str
    rules: tuple[Rule, ...]
    post: tuple[Rule, ...] = ()


@dataclass(frozen=True, slots=True)
class Fragment:
    name: str
    order: str
    rules: tuple[Rule, ...] = field(default_factory=tuple)


@functools.lru_cache(maxsize=2048)
def _program(source: str) -> Any:
    try:
        return cel.compile(source)
    except (ValueError, RuntimeError) as exc:
        raise StateDocError(f"when {source!r} does not compile: {exc}") from exc


def holds(source: str, context: Mapping[str, Any]) -> bool:
    """A rule's ``when``: true when empty; false when it cannot be evaluated."""
    if not source:
        return True
    try:
        return bool(_program(source).execute(dict(context)))
    except StateDocError:
        raise
    except Exception as exc:  # noqa: BLE001 - CEL raises KeyError, TypeError, ValueError...
        log.debug("state-doc predicate %r is false: %s", source, exc)
        return False


def _lookup(path: str, context: Mapping[str, Any]) -> Any:
    current: Any = context
    for part in path.strip().split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            return None
    return current


def resolve(value: Any, context: Mapping[str, Any]) -> Any:
    """Fill ``{a.b}`` templates from ``context``, recursively."""
    if isinstance(value, str) and "{" in value:
        whole = value.strip()
        if whole.startswith("{") and whole.endswith("}") and whole.count("{") == 1:
            return _lookup(whole[1:-1], context)

        def one(m: re.Match[str]) -> str:
            found = _lookup(m.group(1), context)
            return "" if found is None else str(found)

        return _TEMPLATE.sub(one, value)
    if isinstance(value, Mapping):
        return {k: resolve(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, context) for v in value]
    return value


def _strip_front_matter(text: str) -> str:
    if text.startswith("---\n"):
        _, sep, rest = text[4:].partition("\n---\n")
        if sep:
            return rest
    return text


MAX_DEPTH = 50  # brackets, or indentation steps: far more than a state doc needs


def _too_deep(text: str) -> bool:
    """Nesting the YAML parser would take seconds over (it recurses)."""
    depth = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return any(len(line) - len(line.lstrip(" ")) > 4 * MAX_DEPTH for line in text.splitlines())


def _load(name: str, text: str) -> dict[str, Any]:
    body = _strip_front_matter(text)
    if _too_deep(body):
        raise StateDocError(f"{name}: nested too deeply (at most {MAX_DEPTH} levels)")
    try:
        # Anchors and aliases are refused: a few lines of them expand to
        # more than any state doc needs (a "billion laughs").
        if any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(body)):
            raise StateDocError(f"{name}: YAML aliases (*name) are not allowed in a state doc")
        parsed = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise StateDocError(f"{name}: not YAML ({exc})") from exc
    except RecursionError as exc:
        raise StateDocError(f"{name}: nested too deeply") from exc
    if not isinstance(parsed, dict):
        raise StateDocError(f"{name}: a state doc is a YAML mapping")
    return parsed


def _keys_as_text(value: Any) -> Any:
    """YAML allows any key (``1: a``); what a flow answers is JSON."""
    if isinstance(value, dict):
        return {str(k): _keys_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys_as_text(v) for v in value]
    return value


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise StateDocError(f"{where}: each rule is a mapping")
    raw = _keys_as_text(raw)
    rule_id = str(raw["id"]).strip() or None if raw.get("id") is not None else None
    when = str(raw.get("when") or "").strip()
    if when:
        _program(when)  # refused now, not at run time
    do = str(raw["do"]).strip() or None if raw.get("do") is not None else None
    params = raw.get("with")
    if params is not None and not isinstance(params, dict):
        raise StateDocError(f"{where}: 'with' must be a mapping")
    then = raw.get("then")
    if isinstance(then, str):
        then = then.strip() or None
    elif then is not None and not isinstance(then, dict):
        raise StateDocError(f"{where}: 'then' is a state name or {{state, with}}")
    ret, ret_with = raw.get("return"), None
    if isinstance(ret, dict):
        ret_with = ret.get("with") if isinstance(ret.get("with"), dict) else None
        ret = ret.get("status")
    returns = str(ret).strip() or None if ret is not None else None
    return Rule(rule_id, when, do, params, then, returns, ret_with)


def _rules(raw: Any, where: str) -> tuple[Rule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise StateDocError(f"{where}: rules must be a list")
    return tuple(_rule(r, f"{where}[{i}]") for i, r in enumerate(raw))


def parse(name: str, text: str) -> StateDoc:
    """A state doc from its text; :class:`StateDocError` says what is wrong."""
    parsed = _load(name, text)
    match = str(parsed.get("match", "")).strip().lower()
    if match not in ("sequence", "all"):
        raise StateDocError(f"{name}: match must be 'sequence' or 'all'")
    if "rules" not in parsed:
        raise StateDocError(f"{name}: rules are missing")
    return StateDoc(
        name=name,
        match=match,
        rules=_rules(parsed.get("rules"), f"{name}: rules"),
        post=_rules(parsed.get("post"), f"{name}: post"),
    )


def parse_fragment(name: str, text: str) -> Fragment:
    parsed = _load(name, text)
    order = str(parsed.get("order") or "after").strip()
    return Fragment(name=name, order=order, rules=_rules(parsed.get("rules"), f"{name}: rules"))


def merged(base: StateDoc, fragments: Iterable[Fragment]) -> StateDoc:
    """The base doc with its fragments' rules placed by their ``order``
    (fragments in name order; an unknown target appends)."""
    rules = list(base.rules)
    before: list[Rule] = []
    after: list[Rule] = []
    for frag in sorted(fragments, key=lambda f: f.name):
        position, _, target = frag.order.partition(":")
        position, target = position.strip(), target.strip()
        if not target:
            (before if position == "before" else after).extend(frag.rules)
            continue
        at = next((i for i, r in enumerate(rules) if r.id == target), None)
        if at is None or position not in ("before", "after"):
            after.extend(frag.rules)
            continue
        at += 1 if position == "after" else 0
        rules[at:at] = frag.rules
    return replace(base, rules=(*before, *rules, *after))
