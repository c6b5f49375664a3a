"""keep's compatibility states (compat-get-item, compat-find,
compat-analyze) and the pieces the flow actions share: each a call to the
notes and search services the REST routes use (no second put, tag or find),
returning the binding keys keep's clients read (KEEP_PROTOCOL §4.1, §4.2).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NotEmbeddedYet, NotFound
from app.flows import signals
from app.graph import service as graph
from app.notes import service as notes
from app.notes.views import ItemView
from app.providers.embedding.base import Embedder, QueryCache
from app.search import service as search
from app.settings import Limits
from app.tenancy import Scope


@dataclass(frozen=True, slots=True)
class FlowContext:
    session: AsyncSession
    scope: Scope
    embedder: Embedder
    cache: QueryCache
    limits: Limits


@dataclass(slots=True)
class Outcome:
    bindings: dict[str, Any]
    data: dict[str, Any] | None = None  # None: the bindings themselves
    status: str = "done"
    tried_queries: list[str] = field(default_factory=list)


State = Callable[[FlowContext, dict[str, Any]], Awaitable[Outcome]]

# keep's server-side defaults, merged under the caller's params (api.py:6703).
DEFAULT_PARAMS: dict[str, Any] = {
    "limit": 10, "margin_high": 0.15, "margin_low": 0.03, "entropy_high": 0.8,
    "entropy_low": 0.3, "lineage_strong": 0.5, "explore_limit": 10, "explore_limit_wide": 15,
    "pivot_limit": 5, "bridge_limit": 5, "deep_limit": 10, "max_summary_length": 200,
    "similar_limit": 3, "meta_limit": 3, "parts_limit": 5, "versions_limit": 3, "edges_limit": 5,
}  # fmt: skip


# -- shapes ------------------------------------------------------------------------------


def item(view: ItemView, *, score: float | bool | None = False) -> dict[str, Any]:
    out: dict[str, Any] = {"id": view.id, "summary": view.summary, "tags": view.tags}
    if score is not False:
        out["score"] = score
    return out


def results(
    items: Sequence[dict[str, Any]],
    *,
    deep_groups: Mapping[str, Any] | None = None,
    margin: float | None = None,
    entropy: float | None = None,
) -> dict[str, Any]:
    """keep's search-result binding (``results``, ``count`` and the signals)."""
    return {
        "results": list(items),
        "count": len(items),
        "deep_groups": dict(deep_groups or {}),
        "margin": margin,
        "entropy": entropy,
        "lineage_strong": 0.0,
        "dominant_lineage_tags": None,
        "top_facet_tags": [],
    }


def _text(params: Mapping[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str | int | float):
        raise BadRequest(f"{key} must be a string")
    return str(value)


def _int(
    params: Mapping[str, Any], key: str, default: int, *, low: int = 0, high: int = 1000
) -> int:
    value = params.get(key, default)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{key} must be an integer") from exc
    return max(low, min(high, number))


def _flag(params: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = params.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value) if value is not None else default


def _tags(params: Mapping[str, Any], key: str = "tags") -> dict[str, Any] | None:
    value = params.get(key)
    if value in (None, "", {}):
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"{key} must be an object of tag values")
    return value


def _note_id(params: Mapping[str, Any], *keys: str) -> str:
    for key in keys:
        value = _text(params, key)
        if value:
            return value
    raise BadRequest(f"{' or '.join(keys)} is required")


# -- writes ------------------------------------------------------------------------------


async def put(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    view = await notes.put(
        ctx.session,
        ctx.scope,
        data=notes.PutInput(
            content=_text(params, "content"),
            uri=_text(params, "uri"),
            id=_text(params, "id"),
            summary=_text(params, "summary"),
            tags=_tags(params),
            created_at=_text(params, "created_at"),
            force=_flag(params, "force"),
        ),
        limits=ctx.limits,
    )
    stored = item(view) | {"changed": view.changed}
    return Outcome(bindings={"stored": stored})


async def move(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    view = await notes.move(
        ctx.session,
        ctx.scope,
        name=_note_id(params, "name"),
        source=_text(params, "source") or "now",
        tags=_tags(params),
        only_current=_flag(params, "only_current"),
    )
    return Outcome(bindings={"moved": item(view)})


async def analyze(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    """``compat-analyze``: queue the split into parts; keep's CLI reads
    ``async`` as "queued"."""
    note_id = _note_id(params, "id", "item_id")
    await notes.request_analysis(
        ctx.session, ctx.scope, raw_id=note_id, content=None, limits=ctx.limits
    )
    queued = {"id": note_id, "parts": None, "skipped": False, "queued": True}
    return Outcome(bindings={"analyzed": queued}, data=queued, status="async")


# -- reads -------------------------------------------------------------------------------


async def _maybe_get(ctx: FlowContext, note_id: str) -> ItemView | None:
    try:
        return await notes.get(ctx.session, ctx.scope, raw_id=note_id)
    except NotFound:
        return None


async def get_item(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    """``compat-get-item``: the note, or ``{}`` (``now`` is made on first read)."""
    found = await _maybe_get(ctx, _note_id(params, "id", "item_id"))
    shown = item(found) if found is not None else {}
    return Outcome(bindings={"item": shown}, data={"item": shown})


async def _edges(ctx: FlowContext, note_id: str, limit: int) -> dict[str, Any]:
    """keep's ``edges`` binding: notes pointing here, by inverse verb."""
    if limit <= 0:
        return {"edges": {}, "count": 0}
    grouped = await graph.incoming(ctx.session, ctx.scope, note_id=note_id, limit=limit)
    edges = {
        verb: [
            {"id": e["source_id"], "summary": e["summary"], "predicate": verb, "date": e["date"]}
            for e in entries
        ]
        for verb, entries in grouped.items()
    }
    return {"edges": edges, "count": sum(len(v) for v in edges.values())}


async def _find(ctx: FlowContext, data: search.FindInput) -> search.SearchResult:
    try:
        return await search.find(
            ctx.session, ctx.scope, embedder=ctx.embedder, cache=ctx.cache, data=data
        )
    except NotEmbeddedYet:
        return search.SearchResult(items=[], pending_embedding=1, mode="similar")


async def list_notes(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    tag_keys = params.get("tag_keys") or []
    listed = await notes.list_notes(
        ctx.session,
        ctx.scope,
        query=notes.ListInput(
            prefix=_text(params, "prefix"),
            tags=_tags(params),
            tag_keys=tag_keys if isinstance(tag_keys, list) else [tag_keys],
            since=_text(params, "since"),
            until=_text(params, "until"),
            order_by=_text(params, "order_by") or "updated",
            limit=_int(params, "limit", 10, low=1, high=ctx.limits.max_list_limit),
            include_hidden=_flag(params, "include_hidden"),
        ),
        limits=ctx.limits,
    )
    return Outcome(bindings={"results": results([item(v, score=None) for v in listed.items])})


def _find_input(params: Mapping[str, Any], limit: int) -> search.FindInput:
    return search.FindInput(
        query=_text(params, "query"),
        similar_to=_text(params, "similar_to"),
        tags=_tags(params),
        since=_text(params, "since"),
        until=_text(params, "until"),
        scope=_text(params, "scope"),
        include_hidden=_flag(params, "include_hidden"),
        include_self=_flag(params, "include_self"),
        limit=limit,
        deep=_flag(params, "deep"),
        deep_follow_depth=_int(params, "deep_follow_depth", 10, low=1, high=100),
    )


async def find(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    """``find``, ``compat-find``: hybrid find, with keep's signals."""
    data = _find_input(params, _int(params, "limit", 10, low=1, high=100))
    if not data.query and not data.similar_to:
        if data.deep:
            raise BadRequest("find needs query or similar_to")
        return await list_notes(ctx, dict(params))
    found = await _find(ctx, data)
    shown = [item(v, score=round(s, 4)) for v, s in found.items]
    groups = {
        base: [item(v, score=round(s, 4)) for v, s in group] for base, group in found.deep_groups
    }
    scores = [s for _, s in found.items]
    margin = round(signals.margin(scores), 4) if scores else None
    entropy = round(signals.entropy(scores), 4) if scores else None
    return Outcome(
        bindings={"results": results(shown, deep_groups=groups, margin=margin, entropy=entropy)},
        tried_queries=[data.query] if data.query else [],
    )


async def compat_find(ctx: FlowContext, params: dict[str, Any]) -> Outcome:
    out = await find(ctx, params)
    found = out.bindings["results"]
    out.data = {"items": found["results"], "deep_groups": found.get("deep_groups", {})}
    return out
