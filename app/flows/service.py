"""keep's ``POST /v1/flow``: run a state and answer in the FlowResult
envelope (KEEP_PROTOCOL §3.1, §4).

A state is the project's ``.state/<name>`` doc (keep's named flows are
seeded into every project; a project may edit them or add its own), run by
:mod:`app.flows.runtime` for at most ``budget`` ticks; a flow that runs out
stops with a cursor that resumes it. keep's private compatibility names
(compat-get-item, compat-find, compat-analyze: the client sends their YAML
inline on every call) and ``prompt`` are answered by keepmem directly.

Flow-level failures are answers, not HTTP errors: an unknown state, a doc
that does not parse, a failed sub-flow come back with ``status: "error"``
and the reason in ``data``; an action that refuses its input binds
``{"error": ...}`` as in keep. A flow that ends in error leaves nothing
behind (it runs in a savepoint that is then rolled back).
"""

from __future__ import annotations

import json
from typing import Any

from app.errors import AppError, MissingScope
from app.flows import prompts, runtime, statedoc, states
from app.flows.host import KeepmemHost
from app.flows.schemas import FlowRequest, FlowResult
from app.flows.states import FlowContext, Outcome, State
from app.tenancy import WRITE

RESUME_SENTINEL = "__cursor__"
DEFAULT_BUDGET = 5
MAX_BUDGET = 100
COMPAT: dict[str, State] = {
    "compat-get-item": states.get_item,
    "compat-find": states.compat_find,
    "compat-analyze": states.analyze,
}


class _Undone(Exception):
    def __init__(self, ran: runtime.Run) -> None:
        super().__init__(ran.status)
        self.ran = ran


def _error(state: str, data: dict[str, Any], *, ticks: int = 0) -> FlowResult:
    return FlowResult(status="error", data=data, ticks=ticks, history=[state] if ticks else [])


def _budget(raw: int | str | None) -> int | None:
    if raw is None or raw == "":
        return DEFAULT_BUDGET
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _render(data: dict[str, Any] | None, token_budget: int) -> str:
    """A text answer of at most ``token_budget`` tokens (~4 characters each)."""
    if not data:
        return ""
    if isinstance(data.get("text"), str):
        text = str(data["text"])
    else:
        found = data.get("items") or data.get("results") or []
        if isinstance(found, dict):
            found = found.get("results", [])
        if isinstance(found, list) and found:
            text = "\n".join(
                f"- {i.get('id')}: {str(i.get('summary', '')).strip()}"
                for i in found
                if isinstance(i, dict)
            )
        else:
            text = json.dumps(data, default=str)
    limit = token_budget * 4
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


async def run(ctx: FlowContext, request: FlowRequest) -> FlowResult:
    state = request.state.strip()
    token = request.cursor_token or request.cursor
    cursor = None
    if token:
        # A cursor resumes its own state, whether the call names it again
        # or sends the CLI's sentinel; one that is not keepmem's resumes
        # nothing (a named state then runs afresh).
        cursor = runtime.decode_cursor(token)
        if cursor is None and state in ("", RESUME_SENTINEL):
            return _error(state, {"reason": "invalid cursor"})
        state = cursor.state if cursor is not None else state
    if not state or state == RESUME_SENTINEL:
        return _error(state, {"reason": "state is required"})
    budget = _budget(request.budget)
    if budget is None:
        return _error(state, {"reason": "budget must be an integer"})
    params = {**states.DEFAULT_PARAMS, **(request.params or {})}
    if state in COMPAT or state == "prompt":
        return await _direct(ctx, request, state, params, budget)
    inline = {}
    if request.state_doc_yaml:
        try:
            inline[state] = statedoc.parse(state, request.state_doc_yaml)
        except statedoc.StateDocError as exc:
            return _error(state, {"reason": f"inline state doc: {exc}"})
    budget = min(budget, MAX_BUDGET)
    host = KeepmemHost(ctx, writable=request.writable, inline=inline)
    try:
        async with ctx.session.begin_nested():
            ran = await runtime.run(host, state, params, budget, cursor=cursor)
            if ran.status == "error":
                raise _Undone(ran)  # leaving the savepoint by an error rolls it back
    except _Undone as undone:
        ran = undone.ran
    result = FlowResult(
        status=ran.status,
        bindings=ran.bindings,
        data=ran.data,
        ticks=ran.ticks,
        history=ran.history,
        cursor=ran.cursor,
        tried_queries=ran.tried_queries,
    )
    if request.token_budget:
        result.rendered = _render(ran.data, request.token_budget)
    return result


async def _direct(
    ctx: FlowContext, request: FlowRequest, state: str, params: dict[str, Any], budget: int
) -> FlowResult:
    """keep's compatibility states and ``prompt``, in one tick."""
    handler: State = prompts.prompt if state == "prompt" else COMPAT[state]
    if state == "compat-analyze" and not request.writable:
        return _error(state, {"reason": f"state {state!r} writes, and this flow is read-only"})
    if state == "compat-analyze" and WRITE not in ctx.scope.permissions:
        raise MissingScope(f"state {state!r} writes: this API key lacks the 'write' scope")
    if budget < 1:
        cursor = runtime.encode_cursor(runtime.Cursor(state))
        return FlowResult(status="stopped", data={"reason": "budget", "results": []}, cursor=cursor)
    try:
        async with ctx.session.begin_nested():
            outcome: Outcome = await handler(ctx, params)
    except AppError as exc:
        return _error(state, {"error": exc.message, "code": exc.code}, ticks=1)
    data = outcome.data if outcome.data is not None else dict(outcome.bindings)
    result = FlowResult(
        status=outcome.status,
        bindings=outcome.bindings,
        data=data,
        ticks=1,
        history=[state],
        tried_queries=outcome.tried_queries,
    )
    if request.token_budget:
        result.rendered = _render(data, request.token_budget)
    return result
