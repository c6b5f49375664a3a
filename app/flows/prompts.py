"""keep's ``prompt`` state: the agent prompts a project holds as
``.prompt/agent/<name>`` notes, listed and rendered with their placeholders
(``{get}``, ``{find}``, ``{text}``, ``{since}``) filled from memory."""

from __future__ import annotations

import re
from typing import Any

from app.errors import NotFound
from app.flows import states
from app.flows.states import FlowContext, Outcome
from app.notes import service as notes

PREFIX = ".prompt/agent/"
_PLACEHOLDER = re.compile(r"\{(get|find|text|since)\}")


def describe(body: str) -> str:
    """The first line of prose after the title."""
    for line in body.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    return ""


def _arguments(tags: dict[str, Any]) -> list[str] | None:
    raw = tags.get("mcp_prompt")
    if not raw:
        return None
    values = raw if isinstance(raw, list) else str(raw).split(",")
    return [v.strip() for v in values if v.strip()]


async def list_prompts(ctx: FlowContext) -> Outcome:
    listed = await notes.list_notes(
        ctx.session,
        ctx.scope,
        query=notes.ListInput(prefix=PREFIX, include_hidden=True, order_by="id", limit=1000),
        limits=ctx.limits,
    )
    prompts = []
    for view in listed.items:
        entry: dict[str, Any] = {"name": view.id[len(PREFIX) :], "summary": describe(view.summary)}
        if (args := _arguments(view.tags)) is not None:
            entry["mcp_arguments"] = args
        prompts.append(entry)
    return Outcome(bindings={}, data={"prompts": prompts})


def _lines(items: list[dict[str, Any]]) -> str:
    if not items:
        return "(nothing found)"
    return "\n".join(f"- {i['id']}: {str(i['summary']).strip()}" for i in items)


async def render(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    name = str(params.get("name") or "").strip()
    try:
        doc = await notes.get(ctx.session, ctx.scope, raw_id=PREFIX + name)
    except NotFound:
        return Outcome(bindings={}, data={"error": f"prompt not found: {name}"}, status="error")
    body = doc.summary
    if "## Prompt" in body:
        body = body.split("## Prompt", 1)[1].strip()
    text = str(params.get("text") or "")
    since = str(params.get("since") or "")
    focus = str(params.get("id") or "now")
    filled: dict[str, str] = {"text": text, "since": since}
    context: dict[str, Any] | None = None
    if "{get}" in body:
        got = await states.get_context(ctx, {"item_id": focus, "similar_limit": 3})
        shown = got.bindings.get("item") or {}
        filled["get"] = f"{shown.get('id', focus)}: {shown.get('summary', '')}".strip()
        context = got.bindings
    if "{find}" in body:
        if text:
            found = await states.find(
                ctx, {**states.DEFAULT_PARAMS, **params, "query": text, "limit": 10}
            )
            filled["find"] = _lines(found.bindings["results"]["results"])
        else:
            recent = await states.list_notes(ctx, {"since": since or None, "limit": 10})
            filled["find"] = _lines(recent.bindings["results"]["results"])
    rendered = _PLACEHOLDER.sub(lambda m: filled.get(m.group(1), ""), body)
    data: dict[str, Any] = {"text": rendered}
    if context is not None:
        data["context"] = context
    return Outcome(bindings={}, data=data)


async def prompt(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    if params.get("list") or not params.get("name"):
        return await list_prompts(ctx)
    return await render(ctx, params)
