"""keep's ``GET /v1/notes/{id}/context``: a note with what surrounds it, in
the exact ``ItemContext`` shape keep's Python client parses strictly (an
extra key raises there), KEEP_PROTOCOL §3.4."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import NotEmbeddedYet, NotFound
from app.flows.host import meta_sections
from app.flows.states import FlowContext
from app.graph import service as graph
from app.notes import service as notes
from app.search import service as search


@dataclass(frozen=True, slots=True)
class ContextQuery:
    similar_limit: int = 3
    meta_limit: int = 3
    parts_limit: int = 10
    edges_limit: int = 5
    versions_limit: int = 3
    include_similar: bool = True
    include_meta: bool = True
    include_parts: bool = True
    include_versions: bool = True
    version: int | None = None


def _line(entry: Any) -> dict[str, Any]:
    return {"offset": entry.offset, "date": entry.date[:10], "summary": entry.summary}


async def item_context(ctx: FlowContext, raw_id: str, q: ContextQuery) -> dict[str, Any] | None:
    """The ItemContext of a note (``now`` is made on first read), or None."""
    try:
        current = await notes.get(ctx.session, ctx.scope, raw_id=raw_id)
    except NotFound:
        return None
    note_id = current.id
    offset = max(q.version or 0, 0)
    shown = current
    if offset:
        try:
            shown = await notes.get(ctx.session, ctx.scope, raw_id=f"{note_id}@V{{{offset}}}")
        except NotFound:
            return None
    similar: list[dict[str, Any]] = []
    if q.include_similar and q.similar_limit > 0:
        try:
            found = await search.find(
                ctx.session,
                ctx.scope,
                embedder=ctx.embedder,
                cache=ctx.cache,
                data=search.FindInput(similar_to=note_id, limit=min(q.similar_limit, 100)),
            )
            similar = [
                {
                    "id": v.tags.get("_base_id", v.id),
                    "offset": int(v.tags.get("_version", 0) or 0),
                    "score": round(score, 4),
                    "date": v.updated_at[:10],
                    "summary": v.summary,
                }
                for v, score in found.items
            ]
        except NotEmbeddedYet:
            similar = []
    edges: dict[str, list[dict[str, Any]]] = {}
    if q.edges_limit > 0:
        edges = await graph.incoming(ctx.session, ctx.scope, note_id=note_id, limit=q.edges_limit)
    parts: list[dict[str, Any]] = []
    if q.include_parts and q.parts_limit > 0:
        for part in (await notes.parts(ctx.session, ctx.scope, raw_id=note_id))[: q.parts_limit]:
            tags = {k: v for k, v in part.tags.items() if not k.startswith("_")}
            num = int(part.tags.get("_part_num", 0))
            parts.append({"part_num": num, "summary": part.summary, "tags": tags})
    prev: list[dict[str, Any]] = []
    nxt: list[dict[str, Any]] = []
    if q.include_versions and q.versions_limit > 0:
        entries, _ = await notes.versions(
            ctx.session, ctx.scope, raw_id=note_id, limit=min(q.versions_limit, 1000), offset=offset
        )
        prev = [_line(e) for e in entries]
        if offset:
            newer, _ = await notes.versions(
                ctx.session, ctx.scope, raw_id=note_id, limit=min(offset - 1, 1000) or 1
            )
            nxt = [_line(e) for e in newer if e.offset < offset][: q.versions_limit]
            if len(nxt) < q.versions_limit:
                nxt.append(
                    {"offset": 0, "date": current.updated_at[:10], "summary": current.summary}
                )
    meta: dict[str, list[dict[str, Any]]] = {}
    if q.include_meta and q.meta_limit > 0:
        found_meta = await meta_sections(ctx, note_id, min(q.meta_limit, 100), tags=current.tags)
        meta = {
            name: [{"id": v["id"], "summary": v["summary"]} for v in views]
            for name, views in found_meta.items()
        }
    return {
        "item": {
            "id": note_id,
            "summary": shown.summary,
            "tags": shown.tags,
            "score": None,
            "changed": None,
        },
        "viewing_offset": offset,
        "similar": similar,
        "meta": meta,
        "edges": edges,
        "parts": parts,
        "focus_part": None,
        "expand_parts": False,
        "prev": prev,
        "next": nxt,
    }
