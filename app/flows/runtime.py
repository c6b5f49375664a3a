"""Runs keep's state docs: ticks, transitions, sub-flows, budgets and
cursors (KEEP_PROTOCOL §3.1, §4.3), against whatever :class:`Host` gives
the docs and performs the actions.

One tick evaluates one state doc. ``match: sequence`` runs its rules in
order and stops at the first ``return`` or ``then``; ``match: all`` runs
every rule whose ``when`` holds, then its ``post`` rules in order. A rule's
action output is bound under its id for the rules after it. An action that
fails binds ``{"error": ...}`` and the flow goes on, as in keep; a sub-flow
(``do: .state/<name>``) that fails fails its parent.

A flow that runs out of budget stops with a cursor: base64url JSON of the
state to resume, the ticks used and the bindings so far (results slimmed to
ids and scores), so the caller can resume it with a new budget. Actions
keepmem does only in its worker pipeline (:meth:`Host.is_async`) stop a
foreground flow the same way (status ``async``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.flows import signals
from app.flows.statedoc import Rule, StateDoc, holds, resolve

MAX_CURSOR_CHARS = 65_536
STOPPED_SIGNALS = ("search", "pivot1", "bridge")
STATUSES = frozenset({"done", "error", "stopped"})  # what a rule may return
# Result lists a cursor carries as ids and scores only: it must fit a request.
LISTS = frozenset({"results", "deep_groups", "items", "groups", "sections"})


class FlowFailed(Exception):
    """The flow cannot go on (a failed sub-flow, a bad transition)."""


class ActionFailed(Exception):
    """An action refused its input; the rule binds ``{"error": message}``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Host(Protocol):
    async def load(self, name: str) -> StateDoc | None: ...

    async def act(self, name: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def is_async(self, name: str) -> bool: ...


@dataclass(slots=True)
class Run:
    status: str
    bindings: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    ticks: int = 0
    history: list[str] = field(default_factory=list)
    cursor: str | None = None
    tried_queries: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Cursor:
    state: str
    ticks: int = 0
    bindings: Mapping[str, Any] = field(default_factory=dict)
    tried_queries: tuple[str, ...] = ()


def _ids(found: Any) -> Any:
    if isinstance(found, list):
        return [
            {"id": r.get("id"), "score": r.get("score")} if isinstance(r, dict) else r
            for r in found
        ]
    if isinstance(found, dict):
        return {k: _ids(v) for k, v in found.items()}
    return found


def _slim(bindings: Mapping[str, Any]) -> dict[str, Any]:
    """Bindings for a cursor: every key kept, result lists cut to ids and
    scores (as keep's cursors are)."""
    out: dict[str, Any] = {}
    for key, value in bindings.items():
        if isinstance(value, dict):
            value = {k: _ids(v) if k in LISTS else v for k, v in value.items()}
        out[key] = value
    return out


def encode_cursor(cursor: Cursor) -> str:
    """base64url JSON; bindings too big for a request are left out (the
    resumed flow starts from its state with none)."""
    payload: dict[str, Any] = {"s": cursor.state, "t": cursor.ticks, "b": _slim(cursor.bindings)}
    if cursor.tried_queries:
        payload["q"] = list(cursor.tried_queries)
    token = _encode(payload)
    if len(token) > MAX_CURSOR_CHARS:
        token = _encode({**payload, "b": {}})
    return token


def _encode(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(token: str) -> Cursor | None:
    token = (token or "").strip()
    if not token or len(token) > MAX_CURSOR_CHARS:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(raw, dict):
        return None
    state, ticks = raw.get("s"), raw.get("t", 0)
    bindings, tried = raw.get("b") or {}, raw.get("q") or []
    if not isinstance(state, str) or not state.strip():
        return None
    if not isinstance(ticks, int) or isinstance(ticks, bool) or ticks < 0:
        return None
    if not isinstance(bindings, dict) or not isinstance(tried, list):
        return None
    return Cursor(state.strip(), ticks, bindings, tuple(str(q) for q in tried))


@dataclass(slots=True)
class _Tick:
    """What one evaluation of a doc ended with."""

    bindings: dict[str, Any]
    terminal: str | None = None
    data: dict[str, Any] | None = None
    transition: str | Mapping[str, Any] | None = None


class AsyncAction(Exception):
    def __init__(self, action: str) -> None:
        super().__init__(action)
        self.action = action


class _Flow:
    def __init__(self, host: Host, budget: int, *, foreground: bool) -> None:
        self.host = host
        self.budget = budget
        self.foreground = foreground
        self.ticks = 0
        self.child_ticks = 0
        self.tried: list[str] = []

    async def call(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        if name.startswith(".state/"):
            return await self.subflow(name.removeprefix(".state/").strip(), params)
        if self.foreground and self.host.is_async(name):
            raise AsyncAction(name)
        try:
            output = await self.host.act(name, params)
        except ActionFailed as exc:
            return {"error": exc.message} | ({"code": exc.code} if exc.code else {})
        if name == "find":
            output = signals.enrich(output)
            query = params.get("query")
            if isinstance(query, str) and query and query not in self.tried:
                self.tried.append(query)
        return output

    async def subflow(self, state: str, params: dict[str, Any]) -> dict[str, Any]:
        if not state:
            raise FlowFailed("a sub-flow needs a state name")
        left = self.budget - (self.ticks + self.child_ticks)
        if left <= 0:
            raise FlowFailed(f"subflow {state!r} cannot run: budget exhausted")
        child = await run(self.host, state, params, left, foreground=self.foreground)
        self.child_ticks += child.ticks
        self.tried += [q for q in child.tried_queries if q not in self.tried]
        if child.status == "done":
            return dict(child.data or {})
        reason = ""
        if isinstance(child.data, dict):
            reason = str(child.data.get("reason") or child.data.get("error") or "").strip()
        if child.status == "error":
            raise FlowFailed(f"subflow {state!r} failed" + (f": {reason}" if reason else ""))
        raise FlowFailed(f"subflow {state!r} returned {child.status!r}")

    async def _do(self, rule: Rule, ctx: dict[str, Any], bindings: dict[str, Any]) -> None:
        assert rule.do is not None
        params = resolve(dict(rule.params or {}), ctx)
        output = await self.call(rule.do, params if isinstance(params, dict) else {})
        if rule.id and isinstance(output, dict):
            bindings[rule.id] = output
            ctx[rule.id] = output

    @staticmethod
    def _end(rule: Rule, ctx: dict[str, Any], bindings: dict[str, Any]) -> _Tick:
        if rule.returns_with:
            data = resolve(dict(rule.returns_with), ctx)
            data = data if isinstance(data, dict) else None
        else:
            data = dict(bindings) or None
        return _Tick(bindings, terminal=rule.returns, data=data)

    @staticmethod
    def _go(rule: Rule, ctx: dict[str, Any], bindings: dict[str, Any]) -> _Tick:
        then = rule.then
        if isinstance(then, Mapping) and isinstance(then.get("with"), dict):
            then = {**then, "with": resolve(then["with"], ctx)}
        return _Tick(bindings, transition=then)

    async def tick(self, doc: StateDoc, ctx: dict[str, Any]) -> _Tick:
        bindings: dict[str, Any] = {}
        if doc.match == "sequence":
            for rule in doc.rules:
                if not holds(rule.when, ctx):
                    continue
                if rule.returns is not None:
                    return self._end(rule, ctx, bindings)
                if rule.do is not None:
                    await self._do(rule, ctx, bindings)
                if rule.then is not None:
                    return self._go(rule, ctx, bindings)
            return _Tick(bindings, terminal="done")
        for rule in doc.rules:
            if rule.do is not None and holds(rule.when, ctx):
                await self._do(rule, ctx, bindings)
        for rule in doc.post:
            if not holds(rule.when, ctx):
                continue
            if rule.returns is not None:
                return self._end(rule, ctx, bindings)
            if rule.then is not None:
                return self._go(rule, ctx, bindings)
        return _Tick(bindings, terminal="done")


def _context(params: Mapping[str, Any], *, budget: int, tick: int) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "params": dict(params),
        "budget": {"total": budget, "remaining": max(budget - tick, 0)},
        "flow": {"tick": tick},
    }
    for key in ("item", "system"):
        if isinstance(params.get(key), dict):
            ctx[key] = params[key]
    return ctx


def _transition(then: Any) -> tuple[str | None, dict[str, Any]]:
    if isinstance(then, str):
        return then.strip() or None, {}
    if isinstance(then, Mapping):
        state = then.get("state")
        if isinstance(state, str) and state.strip():
            extra = then.get("with")
            return state.strip(), dict(extra) if isinstance(extra, dict) else {}
    return None, {}


def _stopped_data(reason: str, bindings: Mapping[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"reason": reason}
    for key in STOPPED_SIGNALS:
        found = bindings.get(key)
        if isinstance(found, dict) and "results" in found:
            data["results"] = found["results"]
            data |= {k: found[k] for k in ("margin", "entropy") if k in found}
            break
    return data


async def run(
    host: Host,
    state: str,
    params: Mapping[str, Any],
    budget: int,
    *,
    cursor: Cursor | None = None,
    foreground: bool = True,
) -> Run:
    """Run ``state`` (or resume ``cursor``) for at most ``budget`` ticks."""
    flow = _Flow(host, budget, foreground=foreground)
    current = cursor.state if cursor else state
    prior = cursor.ticks if cursor else 0
    bindings: dict[str, Any] = dict(cursor.bindings) if cursor else {}
    flow.tried = list(cursor.tried_queries) if cursor else []
    now_params = dict(params)
    history: list[str] = []

    def total() -> int:
        return prior + flow.ticks + flow.child_ticks

    def paused(status: str, data: dict[str, Any]) -> Run:
        token = encode_cursor(Cursor(current, total(), bindings, tuple(flow.tried)))
        return Run(status, bindings, data, total(), history, token, flow.tried)

    while flow.ticks < budget:
        try:
            doc = await host.load(current)
        except FlowFailed as exc:
            return Run("error", {}, {"reason": str(exc)}, total(), history)
        if doc is None:
            return Run("error", {}, {"reason": f"state doc not found: {current}"}, total(), history)
        history.append(current)
        flow.ticks += 1
        ctx = _context(now_params, budget=budget, tick=flow.ticks)
        try:
            result = await flow.tick(doc, ctx)
        except AsyncAction as pending:
            return paused("async", {"reason": "async_action", "action": pending.action})
        except FlowFailed as exc:
            reason = {"reason": f"evaluation failed: {exc}"}
            return Run("error", {}, reason, total(), history)
        bindings.update(result.bindings)
        if result.terminal is not None and result.terminal not in STATUSES:
            odd = f"a rule of {current} returned status {result.terminal!r}"
            return Run("error", {}, {"reason": odd + " (done, error or stopped)"}, total(), history)
        if result.terminal is not None:
            return Run(result.terminal, bindings, result.data, total(), history, None, flow.tried)
        following, extra = _transition(result.transition)
        if following is None:
            reason = {"reason": f"invalid transition: {result.transition}"}
            return Run("error", {}, reason, total(), history)
        now_params = {**now_params, **extra}
        current = following
    return paused("stopped", _stopped_data("budget", bindings))
