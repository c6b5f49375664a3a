"""keep's ``prompt`` state: the agent prompts a project holds as
``.prompt/agent/<name>`` notes, listed and rendered from memory.

Rendering takes the doc's ``## Prompt`` section (the whole doc without one),
expands ``{{include:NAME}}`` from ``.prompt/NAME``, runs the flow its
``state`` tag names (keep's prompts use ``get`` and ``find-deep``; a prompt
with placeholders and no ``state`` tag uses ``get``), read-only, with
``item_id`` (``id``, default ``now``), ``query`` (``text``), ``since``,
``until``, ``tags``, ``scope``, and fills the placeholders from its bindings:

- ``{get}``: the note in view with its similar notes, meta sections, edges;
- ``{find}``, ``{find:deep}``, ``{find:<tokens>}``: the search results,
  within that many tokens (default 4000; the call's ``token_budget`` wins);
- ``{<binding>}`` and ``{<binding>|fallback}``: any binding the flow made;
- ``{text}``, ``{since}``, ``{until}``: the values given.
"""

from __future__ import annotations

import re
from typing import Any

from app.errors import NotFound
from app.flows import runtime
from app.flows.host import KeepmemHost
from app.flows.states import FlowContext, Outcome
from app.notes import service as notes

PREFIX = ".prompt/agent/"
INCLUDE_DEPTH = 5
MAX_INCLUDES = 50
FLOW_BUDGET = 10
DEFAULT_TOKENS = 4000
_INCLUDE = re.compile(r"\{\{include:([A-Za-z0-9_./-]+)\}\}")
_FIND = re.compile(r"\{find(?::(deep))?(?::(\d+))?\}")
_NAMED = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\|([^}]*))?\}")
_VALUES = ("text", "since", "until")


class PromptError(ValueError):
    pass


def describe(body: str) -> str:
    """The first line of prose after the title."""
    for line in body.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    return ""


def prompt_section(body: str) -> str:
    """The text under a ``## Prompt`` heading (to the next ``## ``), or ''."""
    m = re.search(r"^## Prompt[ \t]*\n(.*?)(?=^## |\Z)", body, re.MULTILINE | re.DOTALL)
    return m.group(1).strip() if m else ""


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


async def _includes(
    ctx: FlowContext, body: str, chain: frozenset[str], depth: int, seen: list[int]
) -> str:
    """``{{include:NAME}}`` expanded: at most INCLUDE_DEPTH deep and
    MAX_INCLUDES in all (a doc including another many times, each including
    more, would otherwise multiply), no cycles, and no missing doc."""
    if "{{include:" not in body:
        return body
    if depth >= INCLUDE_DEPTH:
        raise PromptError(f"prompt includes nest deeper than {INCLUDE_DEPTH}")
    out, last = [], 0
    for m in _INCLUDE.finditer(body):
        target = ".prompt/" + m.group(1)
        if target in chain:
            raise PromptError(f"prompt include cycle: {target}")
        seen[0] += 1
        if seen[0] > MAX_INCLUDES:
            raise PromptError(f"a prompt includes at most {MAX_INCLUDES} docs")
        try:
            found = await notes.get(ctx.session, ctx.scope, raw_id=target)
        except NotFound as exc:
            raise PromptError(f"prompt include not found: {target}") from exc
        inner = prompt_section(found.summary) or found.summary
        expanded = await _includes(ctx, inner, chain | {target}, depth + 1, seen)
        out += [body[last : m.start()], expanded]
        last = m.end()
    return "".join(out) + body[last:]


def _line(r: dict[str, Any], limit: int = 500) -> str:
    summary = " ".join(str(r.get("summary", "")).split())
    return f"- {r.get('id')}: {summary[:limit]}"


def _within(lines: list[str], tokens: int) -> str:
    out, used = [], 0
    for line in lines:
        if used + len(line) + 1 > tokens * 4:
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def _results(binding: Any) -> list[dict[str, Any]]:
    found = binding.get("results") if isinstance(binding, dict) else None
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def _get_block(b: dict[str, Any]) -> str:
    shown = b.get("item")
    if not isinstance(shown, dict) or "id" not in shown:
        return ""
    lines = [f"{shown['id']}: {str(shown.get('summary', '')).strip()}"]
    if similar := _results(b.get("similar")):
        lines += ["", "similar:", *(_line(r, 200) for r in similar)]
    sections = (b.get("meta") or {}).get("sections") or {}
    for name, found in sections.items():
        lines += ["", f"meta/{name}:", *(_line(r, 200) for r in found if isinstance(r, dict))]
    edges = (b.get("edges") or {}).get("edges") or {}
    for verb, found in edges.items():
        lines += ["", f"{verb}:", *(_line(r, 200) for r in found if isinstance(r, dict))]
    return "\n".join(lines)


def _binding_text(binding: Any, tokens: int) -> str:
    if found := _results(binding):
        return _within([_line(r) for r in found], tokens)
    if isinstance(binding, dict):
        groups = binding.get("groups") or binding.get("sections")
        if isinstance(groups, dict):
            lines = [_line(r) for g in groups.values() if isinstance(g, list) for r in g]
            return _within(lines, tokens)
        if "id" in binding and "summary" in binding:
            return _line(binding)
    return ""


def fill(body: str, bindings: dict[str, Any], values: dict[str, str], tokens: int | None) -> str:
    """The prompt with its placeholders filled (keep's expansion rules)."""
    out = body.replace("{get}", _get_block(bindings))

    def find(m: re.Match[str]) -> str:
        found = _results(bindings.get("find_results")) or _results(bindings.get("search"))
        budget = tokens or (int(m.group(2)) if m.group(2) else DEFAULT_TOKENS)
        if m.group(1):  # deep: the best few, each with what its edges reach
            groups = (bindings.get("related") or {}).get("groups") or {}
            lines = []
            for r in found[:3]:
                lines.append(_line(r))
                lines += ["  " + _line(x, 200) for x in groups.get(r.get("id"), [])]
            return _within(lines, budget)
        return _within([_line(r) for r in found], budget)

    out = _FIND.sub(find, out)
    filled = [b for b in bindings.values() if b]
    share = (tokens or DEFAULT_TOKENS) // max(len(filled), 1)

    def named(m: re.Match[str]) -> str:
        name, fallback = m.group(1), m.group(2)
        if name in _VALUES and fallback is None:
            return m.group(0)
        text = _binding_text(bindings.get(name), share) if name in bindings else ""
        return text if text.strip() else (fallback or "")

    out = _NAMED.sub(named, out)
    for key in _VALUES:
        out = out.replace("{" + key + "}", values.get(key, ""))
    while "\n\n\n" in out:
        out = out.replace("\n\n\n", "\n\n")
    return out.strip()


def _flow_params(params: dict[str, Any], body: str) -> dict[str, Any]:
    out: dict[str, Any] = {"item_id": str(params.get("id") or "now")}
    if text := str(params.get("text") or ""):
        out |= {"query": text, "prompt": text}
    for key in ("since", "until", "scope"):
        if params.get(key):
            out[key] = str(params[key])
    if isinstance(params.get("tags"), dict) and params["tags"]:
        out["tags"] = params["tags"]
    if params.get("deep") or "{find:deep" in body:
        out["deep"] = True
    limit = params.get("limit")
    out["limit"] = limit if isinstance(limit, int) and limit > 0 else 10
    return out


async def _bindings(ctx: FlowContext, state: str, params: dict[str, Any]) -> dict[str, Any]:
    from app.flows.states import DEFAULT_PARAMS

    host = KeepmemHost(ctx, writable=False)
    ran = await runtime.run(host, state, {**DEFAULT_PARAMS, **params}, FLOW_BUDGET)
    reason = str((ran.data or {}).get("reason") or "")
    if ran.status == "error" and reason != "query required":
        raise PromptError(f"prompt flow {state!r} failed: {reason or ran.data}")
    if ran.status == "stopped" and reason not in ("budget", "ambiguous"):
        raise PromptError(f"prompt flow {state!r} stopped: {reason or ran.data}")
    return ran.bindings


async def render(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    name = str(params.get("name") or "").strip()
    doc_id = PREFIX + name
    try:
        doc = await notes.get(ctx.session, ctx.scope, raw_id=doc_id)
    except NotFound:
        return Outcome(bindings={}, data={"error": f"prompt not found: {name}"}, status="error")
    try:
        section = prompt_section(doc.summary) or doc.summary
        body = await _includes(ctx, section, frozenset(), 0, [0])
        state = str(doc.tags.get("state") or "")
        if not state and ("{get}" in body or "{find" in body):
            state = "get"
        bindings = await _bindings(ctx, state, _flow_params(params, body)) if state else {}
    except PromptError as exc:
        return Outcome(bindings={}, data={"error": str(exc)}, status="error")
    tokens = params.get("token_budget")
    values = {k: str(params.get(k) or "") for k in _VALUES}
    rendered = fill(
        body, bindings, values, tokens if isinstance(tokens, int) and tokens > 0 else None
    )
    return Outcome(bindings=bindings, data={"text": rendered})


async def prompt(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    if params.get("list") or not params.get("name"):
        return await list_prompts(ctx)
    return await render(ctx, params)
