"""The graph around notes: entities, mentions and relations found by
extraction (``store_extraction``), walks over them and over the tag edges
that the notes domain keeps (``app.notes.edges``), and the whole graph taken
away (``export_graph``: GraphML or CSV, with topic nodes from ``topic`` tags)
or counted (``stats``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, EntityNotFound, NoteNotFound
from app.graph import export
from app.graph import repository as repo
from app.kit.ids import InvalidId, is_part_id, normalize_id
from app.kit.tags import InvalidTags, values_of
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


# -- taking the graph away: export and statistics ------------------------------------

EXPORT_ROWS = 100_000  # per table; a cut table is flagged, never silently short
COMPONENT_RELATIONS = 100_000  # relation pairs the component count reads at most
SUMMARY_CHARS = 200
TOPIC = "topic"  # the tag whose values become topic nodes
FORMATS = ("graphml", "csv")


def _cut(rows: list[Any], table: str, truncated: list[str]) -> list[Any]:
    """``rows`` (read with one row beyond the cap) cut to the cap."""
    if len(rows) > EXPORT_ROWS:
        truncated.append(table)
    return rows[:EXPORT_ROWS]


async def _topics(
    session: AsyncSession, scope: Scope, truncated: list[str]
) -> list[tuple[str, str, str]]:
    """(topic, value as written, note id) for every value of every visible
    note's ``topic`` tag (a list holds several). The topic is the value
    case-folded, as tag filters compare values, so ``River`` and ``river``
    are one topic node."""
    rows = await repo.tag_values(
        session, scope, key=TOPIC, exclude_source=STUB_SOURCE, limit=EXPORT_ROWS
    )
    out: list[tuple[str, str, str]] = []
    for note_id, raw in rows[:EXPORT_ROWS]:
        try:
            values = values_of(raw, TOPIC)
        except InvalidTags:
            continue
        out.extend((v.casefold(), v, note_id) for v in values if v)
    if len(rows) > EXPORT_ROWS or len(out) > EXPORT_ROWS:
        truncated.append("topics")
    return out[:EXPORT_ROWS]


async def _table(
    session: AsyncSession, scope: Scope, table: str, truncated: list[str]
) -> list[Any]:
    if table == "topics":
        return await _topics(session, scope, truncated)
    rows: list[Any]
    if table == "entities":
        rows = await repo.all_entities(session, scope, limit=EXPORT_ROWS)
    elif table == "mentions":
        rows = await repo.all_mentions(session, scope, limit=EXPORT_ROWS)
    elif table == "relations":
        rows = await repo.all_relations(session, scope, limit=EXPORT_ROWS)
    else:
        rows = await repo.all_edges(session, scope, limit=EXPORT_ROWS)
    return _cut(rows, table, truncated)


async def export_graph(
    session: AsyncSession, scope: Scope, *, format: str, table: str | None
) -> export.Exported:
    """The graph the caller can see, as one GraphML document or one CSV
    table; each table holds at most ``EXPORT_ROWS`` rows and says so when cut."""
    truncated: list[str] = []
    if format == "csv":
        if table not in export.TABLES:
            raise BadRequest(f"format=csv needs table, one of: {', '.join(export.TABLES)}")
        cut = await _table(session, scope, table, truncated)
        return export.Exported(
            body=export.csv_text(table, cut),
            media_type=export.CSV_MEDIA_TYPE,
            filename=f"graph-{table}.csv",
            truncated=bool(truncated),
        )
    if format != "graphml":
        raise BadRequest(f"format must be one of: {', '.join(FORMATS)}")
    if table is not None:
        raise BadRequest("table applies to format=csv only (GraphML holds every table)")
    found = {t: await _table(session, scope, t, truncated) for t in export.TABLES}
    rows = export.GraphRows(
        entities=found["entities"],
        mentions=found["mentions"],
        relations=found["relations"],
        edges=found["edges"],
        topics=found["topics"],
        truncated=truncated,
    )
    heads = await repo.note_heads(
        session, scope, sorted(export.note_ids(rows)), summary_chars=SUMMARY_CHARS
    )
    for note_id in export.note_ids(rows):
        summary, source = heads.get(note_id, ("", ""))
        rows.notes[note_id] = export.NoteHead(
            summary=summary, part=is_part_id(note_id), stub=source == STUB_SOURCE
        )
    return export.Exported(
        body=export.graphml(rows),
        media_type=export.GRAPHML_MEDIA_TYPE,
        filename="graph.graphml",
        truncated=bool(truncated),
    )


def components(pairs: Sequence[tuple[str, str]]) -> tuple[int, int, int]:
    """(components, entities in them, size of the largest) of the undirected
    graph the pairs draw (union-find with path halving)."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
    sizes: dict[str, int] = {}
    for x in parent:
        r = root(x)
        sizes[r] = sizes.get(r, 0) + 1
    return len(sizes), len(parent), max(sizes.values(), default=0)


async def stats(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    """Counts over the graph the caller can see. Counts are exact; the
    connected components of the entity-relation graph are computed here over
    at most ``COMPONENT_RELATIONS`` relation pairs (``capped`` says when
    more exist). Entities no relation touches are components of one."""
    kinds = await repo.entity_kinds(session, scope)
    counts = await repo.graph_counts(session, scope)
    topic_notes, topic_count, top_topics = await repo.tag_value_counts(
        session, scope, key=TOPIC, exclude_source=STUB_SOURCE, limit=10
    )
    pairs = await repo.relation_pairs(session, scope, limit=COMPONENT_RELATIONS)
    capped = len(pairs) > COMPONENT_RELATIONS
    pairs = pairs[:COMPONENT_RELATIONS]
    linked, related, largest = components(pairs)
    entities = sum(kinds.values())
    isolated = max(entities - related, 0)
    top = await repo.most_mentioned(session, scope, limit=10)
    return {
        "entities": entities,
        "entities_by_kind": kinds,
        **counts,
        "relations_by_predicate": [
            {"predicate": p, "count": n}
            for p, n in await repo.predicate_counts(session, scope, edges=False, limit=20)
        ],
        "note_edges_by_predicate": [
            {"predicate": p, "count": n}
            for p, n in await repo.predicate_counts(session, scope, edges=True, limit=100)
        ],
        "topics": topic_count,
        "notes_with_topics": topic_notes,
        "top_topics": [{"topic": t, "notes": n} for t, n in top_topics],
        "top_entities": [
            {"key": k, "name": name, "kind": kind, "notes": n} for k, name, kind, n in top
        ],
        "components": {
            "count": linked + isolated,
            "largest": max(largest, 1 if isolated else 0),
            "isolated": isolated,
            "relation_pairs": len(pairs),
            "capped": capped,
            "limit": COMPONENT_RELATIONS,
        },
    }
