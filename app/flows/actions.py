"""keep's flow actions over keepmem's services, with the outputs keep's own
actions give (so state docs written for keep read them unchanged).

Each action takes the rule's resolved ``with:`` params. A refused input
raises :class:`ActionFailed`; the runtime binds it as ``{"error": ...}``
as keep does. Writes need a writable flow and a write-scoped key (a key
without it is refused with 403 for the whole request, as the REST routes
do). Work keepmem does in its worker pipeline is queued, not done inline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from app.errors import AppError, ContentNotHeld, NotFound
from app.flows import states
from app.flows.runtime import ActionFailed
from app.flows.states import FlowContext, item
from app.graph import service as graph
from app.kit import tags as tagrules
from app.notes import service as notes
from app.notes.views import ItemView
from app.search import service as search

Action = Callable[[FlowContext, dict[str, Any]], Awaitable[dict[str, Any]]]

MAX_FOLLOW = 100
MAX_ITEMS = notes.MAX_BATCH  # notes one action tags or traverses from, as a batch


def _refuse(message: str) -> ActionFailed:
    return ActionFailed(message)


def _text(p: Mapping[str, Any], key: str) -> str | None:
    try:
        return states._text(p, key)
    except AppError as exc:
        raise _refuse(exc.message) from exc


def _int(p: Mapping[str, Any], key: str, default: int, *, low: int = 0, high: int = 1000) -> int:
    try:
        return states._int(p, key, default, low=low, high=high)
    except AppError as exc:
        raise _refuse(exc.message) from exc


def _tags(p: Mapping[str, Any], key: str = "tags") -> dict[str, Any] | None:
    value = p.get(key)
    return value if isinstance(value, dict) and value else None


def _id(p: Mapping[str, Any], *keys: str) -> str:
    for key in keys:
        raw = p.get(key)
        if isinstance(raw, dict):
            raw = raw.get("id")
        if raw is not None and str(raw).strip():
            return str(raw).strip()
    raise _refuse(f"{' or '.join(keys)} is required")


def _flag(p: Mapping[str, Any], key: str, default: bool = False) -> bool:
    return states._flag(p, key, default)


def _result(view: ItemView, score: float | None = None) -> dict[str, Any]:
    return item(view, score=None if score is None else round(score, 4))


# -- reads -------------------------------------------------------------------------------


async def _closest_members(
    ctx: FlowContext, data: search.FindInput, wanted: int
) -> list[tuple[ItemView, float | None]]:
    """``similar_to`` with a tag filter (a meta section's rule): the filter
    says which notes belong, closeness only their order. The members are
    read first (a filter nothing matches costs no vector search); those
    closeness could not rank (no vector yet) follow the ranked, newest first."""
    assert data.similar_to and data.tags
    listed = await notes.list_notes(
        ctx.session,
        ctx.scope,
        query=notes.ListInput(tags=data.tags, limit=wanted + 1),
        limits=ctx.limits,
    )
    members = [v for v in listed.items if v.id != data.similar_to]
    if not members:
        return []
    rows: list[tuple[ItemView, float | None]] = [
        (v, s) for v, s in (await states._find(ctx, data)).items
    ]
    have = {v.id for v, _ in rows}
    rows += [(v, None) for v in members if v.id not in have]
    return rows[:wanted]


async def find(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    limit = _int(p, "limit", 10, low=-1, high=ctx.limits.max_list_limit)
    if limit <= 0:
        return {"results": [], "count": 0}
    query, similar_to = _text(p, "query"), _text(p, "similar_to")
    prefix, tags = _text(p, "prefix"), _tags(p)
    tag_keys = p.get("tag_keys") if isinstance(p.get("tag_keys"), list) else None
    since, until = _text(p, "since"), _text(p, "until")
    if not any((query, similar_to, tags, tag_keys, prefix, since, _flag(p, "list_all"))):
        raise _refuse("find requires one of query, similar_to, tags, prefix, or since")
    if query and similar_to:
        raise _refuse("find.query and find.similar_to are mutually exclusive")
    offset = _int(p, "offset", 0, high=10_000)
    raw_bias = p.get("bias")
    bias: dict[str, float] = {}
    if isinstance(raw_bias, dict):
        bias = {str(k): float(v) for k, v in raw_bias.items() if isinstance(v, int | float)}
    wanted = limit + offset + sum(1 for w in bias.values() if w == 0)
    groups: dict[str, list[dict[str, Any]]] = {}
    rows: list[tuple[ItemView, float | None]]
    if prefix and prefix.endswith("@p"):
        base = prefix[:-2]
        try:
            found = await notes.parts(ctx.session, ctx.scope, raw_id=base)
        except NotFound:
            found = []
        parts = [_result(replace(v, id=f"{base}@p{v.tags.get('_part_num', '')}")) for v in found][
            offset:
        ][:limit]
        return {"results": parts, "count": len(parts)}  # keep's parts answer: no groups
    elif query or similar_to:
        data = search.FindInput(
            query=query,
            similar_to=similar_to,
            tags=tags,
            since=since,
            until=until,
            scope=_text(p, "scope"),
            include_hidden=_flag(p, "include_hidden"),
            include_self=_flag(p, "include_self"),
            limit=min(wanted, 100),
            deep=_flag(p, "deep"),
            deep_follow_depth=_int(p, "deep_follow_depth", 10, low=1, high=MAX_FOLLOW),
        )
        try:
            if similar_to and tags:
                rows = await _closest_members(ctx, data, wanted)
            else:
                hits = await states._find(ctx, data)
                rows = [(v, s) for v, s in hits.items]
                groups = {
                    base: [_result(v, s) for v, s in group] for base, group in hits.deep_groups
                }
        except AppError as exc:
            raise _refuse(exc.message) from exc
    else:
        try:
            listed = await notes.list_notes(
                ctx.session,
                ctx.scope,
                query=notes.ListInput(
                    prefix=prefix,
                    tags=tags,
                    tag_keys=tag_keys,
                    since=since,
                    until=until,
                    order_by=_text(p, "order_by") or "updated",
                    include_hidden=_flag(p, "include_hidden"),
                    limit=min(wanted, ctx.limits.max_list_limit),
                ),
                limits=ctx.limits,
            )
        except AppError as exc:
            raise _refuse(exc.message) from exc
        rows = [(v, None) for v in listed.items]
    if bias:
        rows = [(v, s) for v, s in rows if bias.get(v.id, 1.0) != 0]
    results = [_result(v, s) for v, s in rows[offset:][:limit]]
    if bias:
        for r in results:
            weight = bias.get(r["id"])
            if weight and isinstance(r.get("score"), float):
                r["score"] = round(r["score"] * weight, 4)
        results.sort(key=lambda r: -(r.get("score") or 0))
    return {"results": results, "count": len(results), "deep_groups": groups}


async def get(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    found = await states._maybe_get(ctx, _id(p, "id", "item_id"))
    return {} if found is None else item(found)


async def list_versions(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    try:
        entries, _ = await notes.versions(
            ctx.session,
            ctx.scope,
            raw_id=_id(p, "id", "item_id"),
            limit=_int(p, "limit", 3, low=1, high=1000) or 3,
        )
    except NotFound:
        entries = []
    shown = [{"offset": e.offset, "summary": e.summary, "date": e.date} for e in entries]
    return {"versions": shown, "count": len(shown)}


async def list_parts(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    note_id = _id(p, "id", "item_id")
    try:
        found = await notes.parts(ctx.session, ctx.scope, raw_id=note_id)
    except NotFound:
        found = []
    shown = [
        {**item(v, score=None), "id": f"{note_id}@p{v.tags.get('_part_num', '')}"}
        for v in found[: _int(p, "limit", 5, low=1)]
    ]
    return {"results": shown, "count": len(shown)}


async def traverse(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    """Notes linked to each given note by edges (either way), newest first;
    a note with no edges falls back to notes sharing its tags."""
    raw = p.get("items")
    if not isinstance(raw, list) or not raw:
        raise _refuse("traverse requires non-empty items list")
    if len(raw) > MAX_ITEMS:
        raise _refuse(f"traverse takes at most {MAX_ITEMS} items")
    sources = [s for s in (_maybe_id(r) for r in raw) if s]
    limit = _int(p, "limit", 5, low=1, high=100)
    depth = _int(p, "deep_follow_depth", 10, low=1, high=MAX_FOLLOW)
    wanted = set(sources)
    reached = await graph.walk(
        ctx.session, ctx.scope, start=[("note", s) for s in sources], depth=1, per_node=limit * 3
    )
    groups: dict[str, list[dict[str, Any]]] = {}
    for position, source in enumerate(sources):
        linked = [n[1] for n in reached.get(("note", source), {}) if n[0] == "note"]
        views = [v for v in [await states._maybe_get(ctx, i) for i in linked] if v is not None]
        if not views and position < depth:
            views = await _sharing(ctx, source, limit * 3)
        views = sorted(views, key=lambda v: v.updated_at, reverse=True)
        seen: set[str] = set()
        group = []
        for v in views:
            if v.id in wanted or v.id in seen or v.id.startswith("."):
                continue
            seen.add(v.id)
            group.append(item(v, score=None))
            if len(group) >= limit:
                break
        groups[source] = group
    return {"groups": groups, "count": sum(len(g) for g in groups.values())}


def _maybe_id(raw: Any) -> str | None:
    if isinstance(raw, dict):
        raw = raw.get("id")
    text = str(raw).strip() if raw is not None else ""
    return text or None


async def _sharing(ctx: FlowContext, note_id: str, limit: int) -> list[ItemView]:
    view = await states._maybe_get(ctx, note_id)
    if view is None:
        return []
    user = {k: v for k, v in view.tags.items() if not k.startswith("_")}
    terms = tagrules.index_terms(user)
    return await notes.sharing(ctx.session, ctx.scope, terms=terms, exclude=note_id, limit=limit)


async def resolve_edges(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    return await states._edges(ctx, _id(p, "id", "item_id"), _int(p, "limit", 5, high=100) or 5)


async def stats(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    top_k = _int(p, "top_k", 10, low=1, high=100)
    return dict(await notes.profile(ctx.session, ctx.scope, top_k=top_k))


# -- writes ------------------------------------------------------------------------------


async def put(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    if p.get("content") is None and p.get("uri") is None:
        raise _refuse("put requires content or uri")
    return dict((await states.put(ctx, p)).bindings["stored"])


async def stub(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    view = await notes.stub(
        ctx.session,
        ctx.scope,
        raw_id=_id(p, "id"),
        content=_text(p, "content"),
        summary=_text(p, "summary"),
        tags=_tags(p),
        created_at=_text(p, "created_at"),
        limits=ctx.limits,
    )
    return item(view) | {"changed": view.changed}


async def tag(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    set_tags, remove = _tags(p), p.get("remove")
    remove = remove if isinstance(remove, list) else None
    remove_values = _tags(p, "remove_values")
    if not (set_tags or remove or remove_values):
        return {"skipped": True, "reason": "no tag mutations provided"}
    raw = p.get("items")
    targets = [t for t in (_maybe_id(r) for r in raw) if t] if isinstance(raw, list) else []
    targets = targets or [_id(p, "id", "item_id")]
    if len(targets) > MAX_ITEMS:
        raise _refuse(f"tag takes at most {MAX_ITEMS} items")
    shown = []
    for target in targets:
        view = await notes.tag(
            ctx.session,
            ctx.scope,
            raw_id=target,
            set_tags=set_tags,
            remove=remove,
            remove_values=remove_values,
        )
        shown.append(item(view))
    first = shown[0]
    return {"count": len(targets), "ids": targets, **first, "items": shown}


async def delete(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    note_id = _id(p, "id", "item_id")
    result = await notes.delete(
        ctx.session, ctx.scope, raw_id=note_id, delete_versions=_flag(p, "delete_versions", True)
    )
    out: dict[str, Any] = {"deleted": note_id if result.deleted else False}
    if result.reverted and result.item is not None:
        out |= {"reverted": True, "item": item(result.item)}
    return out


async def move(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    params = {**p, "name": p.get("name") or p.get("target")}
    return dict((await states.move(ctx, params)).bindings["moved"])


# -- work keepmem's pipeline does --------------------------------------------------------


async def analyze(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    note_id = _id(p, "item_id", "id")
    try:
        await notes.request_analysis(
            ctx.session, ctx.scope, raw_id=note_id, content=None, limits=ctx.limits
        )
    except ContentNotHeld as exc:
        raise _refuse(exc.message) from exc
    return {"id": note_id, "queued": True}


async def at_ingest(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    """ocr, describe: keepmem extracts text (OCR included) when a document
    is ingested; there is nothing left to do in a flow."""
    return {"skipped": True, "reason": "keepmem extracts document text at ingest"}


async def pass_through(ctx: FlowContext, p: dict[str, Any]) -> dict[str, Any]:
    """``assess_virustotal``: no VirusTotal key is configured in keepmem, so
    the write goes on as asked (keep's ``disabled`` assessment)."""
    out = {k: p.get(k) for k in ("id", "uri", "content", "summary", "created_at")}
    tags = p.get("tags")
    return out | {
        "assessment": "disabled",
        "tags": dict(tags) if isinstance(tags, dict) else {},
        "force": bool(p.get("force") or False),
        "queue_background_tasks": p.get("queue_background_tasks"),
        "stop_processing": False,
        "skip_fetch": False,
    }


WRITES = frozenset({"put", "stub", "tag", "delete", "move", "analyze"})
# Actions keep runs only in its daemon (an LLM call): a foreground flow stops
# at them with status "async" and a cursor, as keep's own runtime does.
ASYNC = frozenset({"generate", "summarize", "auto_tag"})

ACTIONS: dict[str, Action] = {
    "find": find,
    "get": get,
    "list_versions": list_versions,
    "list_parts": list_parts,
    "traverse": traverse,
    "resolve_edges": resolve_edges,
    "stats": stats,
    "put": put,
    "stub": stub,
    "tag": tag,
    "delete": delete,
    "move": move,
    "analyze": analyze,
    "ocr": at_ingest,
    "describe": at_ingest,
    "assess_virustotal": pass_through,
}
