"""The graph around notes: entities, mentions and relations found by
extraction (``store_extraction``), and walks over them and over the tag
edges that the notes domain keeps (``app.notes.edges``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, EntityNotFound, NoteNotFound
from app.graph import repository as repo
from app.kit.ids import InvalidId, normalize_id
from app.notes import repository as notes
from app.notes.edges import STUB_SOURCE, edge_target
from app.notes.repository import edges
from app.providers.graph.base import Extraction
from app.tenancy import Scope

__all__ = ["STUB_SOURCE", "edge_target"]  # edge rules live with the notes that own edges

Node = repo.Node


async def walk(
    session: AsyncSession,
    scope: Scope,
    *,
    start: Sequence[Node],
    depth: int,
    per_node: int = 20,
    max_nodes: int = 500,
) -> dict[Node, dict[Node, tuple[int, Node, str]]]:
    """What is reachable from each start node within ``depth`` hops, either
    direction, through edge tags, mentions (note - entity) and relations
    (entity - entity): {start: {node: (hops, came from, predicate)}}. Fan-out
    is capped per node and in total, so a hub (a speaker with thousands of
    turns) cannot blow up a query."""
    reached: dict[Node, dict[Node, tuple[int, Node, str]]] = {s: {} for s in start}
    frontier: dict[Node, set[Node]] = {s: {s} for s in start}
    total = 0
    for hop in range(1, depth + 1):
        nodes = sorted({n for f in frontier.values() for n in f})
        if not nodes or total >= max_nodes:
            break
        adjacent: dict[Node, list[tuple[str, Node]]] = {}
        for a, predicate, b in await repo.neighbours(session, scope, nodes, per_node=per_node):
            adjacent.setdefault(a, []).append((predicate, b))
        next_frontier: dict[Node, set[Node]] = {}
        for origin, here in frontier.items():
            found = next_frontier.setdefault(origin, set())
            for node in sorted(here):
                for predicate, other in sorted(adjacent.get(node, ())):
                    if other == origin or other in reached[origin] or total >= max_nodes:
                        continue
                    reached[origin][other] = (hop, node, predicate)
                    found.add(other)
                    total += 1
        frontier = {o: f for o, f in next_frontier.items() if f}
    return reached


def entity_key(name: str, kind: str) -> str:
    return f"{kind}:{' '.join(name.casefold().split())}"


async def store_extraction(
    session: AsyncSession, scope: Scope, *, note_id: str, found: Extraction
) -> dict[str, int]:
    """Replace the note's entities, mentions and relations with ``found``."""
    keys = [entity_key(e.name, e.kind) for e in found.entities]
    entities = {k: (k, e.name, e.kind) for k, e in zip(keys, found.entities, strict=True)}
    mentions = {(k, e.start, e.end) for k, e in zip(keys, found.entities, strict=True)}
    relations = {
        (keys[r.subject], r.predicate[:200], keys[r.object], r.start, r.end)
        for r in found.relations
        if keys[r.subject] != keys[r.object]
    }
    await repo.replace_extraction(
        session,
        scope,
        note_id,
        entities=sorted(entities.values()),
        mentions=sorted(mentions),
        relations=sorted(relations),
    )
    return {"entities": len(entities), "mentions": len(mentions), "relations": len(relations)}


async def note_graph(session: AsyncSession, scope: Scope, *, raw_id: str) -> dict[str, Any]:
    """A note's entities (with spans) and the relations extracted from it."""
    note_id = _note_or_404(raw_id)
    if await notes.get(session, scope, note_id) is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    entities = await repo.entities_of_note(session, scope, note_id)
    relations = await repo.relations_of_note(session, scope, note_id)
    return {
        "id": note_id,
        "entities": [
            {"key": e.key, "name": e.name, "kind": e.kind, "spans": [list(s) for s in spans]}
            for e, spans in entities
        ],
        "relations": [
            {
                "subject": r.subject_key,
                "predicate": r.predicate,
                "object": r.object_key,
                "span": [r.span_start, r.span_end],
            }
            for r in relations
        ],
    }


async def entities(
    session: AsyncSession, scope: Scope, *, name: str | None, kind: str | None, limit: int
) -> list[dict[str, Any]]:
    if not 1 <= limit <= 1000:
        raise BadRequest("limit must be between 1 and 1000")
    rows = await repo.search_entities(session, scope, name=name, kind=kind, limit=limit)
    return [{"key": e.key, "name": e.name, "kind": e.kind, "notes": n} for e, n in rows]


async def entity_notes(
    session: AsyncSession, scope: Scope, *, key: str, limit: int
) -> dict[str, Any]:
    found = await repo.entity(session, scope, key)
    if found is None:
        raise EntityNotFound(f"entity not found: {key}")
    rows = await repo.notes_of_entity(session, scope, key, limit=limit)
    by_id = await notes.get_many(session, scope, [n for n, _ in rows])
    return {
        "entity": {"key": found.key, "name": found.name, "kind": found.kind},
        "notes": [
            {"id": n, "summary": by_id[n].summary, "mentions": count}
            for n, count in rows
            if n in by_id
        ],
    }


async def walk_from(
    session: AsyncSession,
    scope: Scope,
    *,
    note: str | None,
    entity: str | None,
    depth: int,
    limit: int,
) -> dict[str, Any]:
    """Everything within ``depth`` hops of a note or an entity, nearest first,
    each with the link it was reached by."""
    if (note is None) == (entity is None):
        raise BadRequest("walk needs exactly one of note and entity")
    if not 1 <= depth <= 5:
        raise BadRequest("depth must be between 1 and 5")
    if note is not None:
        start: Node = ("note", _note_or_404(note))
        if await notes.get(session, scope, start[1]) is None:
            raise NoteNotFound(f"note not found: {note}")
    else:
        start = ("entity", entity or "")
        if await repo.entity(session, scope, start[1]) is None:
            raise EntityNotFound(f"entity not found: {entity}")
    reached = (await walk(session, scope, start=[start], depth=depth, max_nodes=limit))[start]
    ordered = sorted(reached.items(), key=lambda kv: (kv[1][0], kv[0]))
    return {
        "start": {"kind": start[0], "id": start[1]},
        "reached": [
            {
                "kind": node[0],
                "id": node[1],
                "hops": hops,
                "via": {"kind": via[0], "id": via[1], "predicate": predicate},
            }
            for node, (hops, via, predicate) in ordered
        ],
    }


def _note_or_404(raw_id: str) -> str:
    try:
        return normalize_id(raw_id)
    except InvalidId as exc:
        raise BadRequest(f"invalid id: {exc}") from exc


async def incoming(
    session: AsyncSession, scope: Scope, *, note_id: str, limit: int
) -> dict[str, list[dict[str, Any]]]:
    """Notes whose edge tags point at this one, grouped by the inverse verb
    (``speaker: Ada`` on a line shows on Ada as ``said``), newest first."""
    rows = await edges.edges_into(session, scope, note_id, limit=limit)
    verbs = await edges.inverse_verbs(session, scope, {predicate for _, predicate, _, _ in rows})
    out: dict[str, list[dict[str, Any]]] = {}
    for source_id, predicate, summary, updated in rows:
        out.setdefault(verbs.get(predicate, predicate), []).append(
            {"source_id": source_id, "summary": summary, "date": updated.date().isoformat()}
        )
    return out
