"""keep's ``POST /v1/flow``: run a named state and answer in the FlowResult
envelope (KEEP_PROTOCOL §3.1, §4).

Flow-level failures are answers, not HTTP errors: an unknown state, a write
in a read-only flow, a refused inline state doc or a rule the notes service
enforces (a missing note, a bad tag) come back with ``status: "error"`` and
the reason in ``data``. A failing state leaves nothing behind: it runs in a
savepoint that is rolled back. A budget of 0 stops before the first tick and
returns a cursor that resumes the state.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from app.errors import AppError, MissingScope
from app.flows import prompts, states
from app.flows.schemas import FlowRequest, FlowResult
from app.flows.states import FlowContext, Outcome
from app.kit import storable
from app.tenancy import WRITE

RESUME_SENTINEL = "__cursor__"
DEFAULT_BUDGET = 5
# Inline state docs are recognised for keep's private compatibility names
# (the client sends their YAML verbatim); any other inline doc is refused.
COMPAT_STATES = {"compat-get-item", "compat-find", "compat-analyze"}


def _error(state: str, data: dict[str, Any], *, ticks: int = 0) -> FlowResult:
    return FlowResult(status="error", data=data, ticks=ticks, history=[state] if ticks else [])


def _budget(raw: int | str | None) -> int | None:
    if raw is None or raw == "":
        return DEFAULT_BUDGET
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _cursor(state: str) -> str:
    raw = json.dumps({"s": state, "t": 0}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _resume(token: str) -> str | None:
    try:
        raw = storable.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error):  # InputRefused and UnicodeDecodeError are ValueErrors
        return None
    state = raw.get("s") if isinstance(raw, dict) else None
    return state if isinstance(state, str) and state else None


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
    if state in ("", RESUME_SENTINEL) and token:
        # Resume from the cursor's own state. With a state named, the state
        # runs afresh (each of keepmem's states finishes in one tick, and a
        # cursor carries no params), whatever the cursor says.
        resumed = _resume(token)
        if resumed is None:
            return _error(state, {"reason": "invalid cursor"})
        state = resumed
    if not state:
        return _error(state, {"reason": "state is required"})
    if request.state_doc_yaml and state not in COMPAT_STATES:
        return _error(
            state,
            {
                "reason": "inline state docs are not run by keepmem (only keep's compat-get-item, "
                "compat-find and compat-analyze are recognised); use a named state"
            },
        )
    handler = prompts.prompt if state == "prompt" else states.STATES.get(state)
    if handler is None:
        return _error(state, {"reason": f"state doc not found: {state}"})
    if state in states.WRITE_STATES and not request.writable:
        return _error(state, {"reason": f"state {state!r} writes, and this flow is read-only"})
    if state in states.WRITE_STATES and WRITE not in ctx.scope.permissions:
        raise MissingScope(f"state {state!r} writes: this API key lacks the 'write' scope")
    budget = _budget(request.budget)
    if budget is None:
        return _error(state, {"reason": "budget must be an integer"})
    if budget < 1:
        return FlowResult(
            status="stopped", data={"reason": "budget", "results": []}, cursor=_cursor(state)
        )
    params = {**states.DEFAULT_PARAMS, **(request.params or {})}
    try:
        # A savepoint: a state that fails part-way leaves nothing behind.
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
