"""The graph extraction's SQL (entities, mentions, relations) and the walk
over the whole graph (note edges read from the notes domain's ``edges``
table, mentions and relations) that deep find and the graph API use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Edge, GraphEntity, GraphRelation, Mention, Note
from app.tenancy import Scope


def _in_scope(scope: Scope) -> list[ColumnElement[bool]]:
    return [Edge.tenant_id == scope.tenant_id, Edge.project_id == scope.project_id]


Node = tuple[str, str]  # ("note", id) or ("entity", key)


def _capped(rows: Any, per_node: int) -> list[tuple[str, str, str]]:
    seen: dict[str, int] = {}
    out = []
    for a, predicate, b in rows:
        if seen.get(a, 0) < per_node:
            seen[a] = seen.get(a, 0) + 1
            out.append((a, predicate, b))
    return out


async def neighbours(
    session: AsyncSession, scope: Scope, nodes: Sequence[Node], *, per_node: int
) -> list[tuple[Node, str, Node]]:
    """Links of ``nodes`` in either direction, at most ``per_node`` per node and
    kind of link: note-note edges (edge tags), note-entity mentions and
    entity-entity relations. Each link is (from, predicate, to), ``from`` in ``nodes``."""
    note_ids = [i for k, i in nodes if k == "note"]
    keys = [i for k, i in nodes if k == "entity"]
    out: list[tuple[Node, str, Node]] = []

    async def run(stmt: Any, a_kind: str, b_kind: str) -> None:
        for a, predicate, b in _capped(await session.execute(stmt), per_node):
            out.append(((a_kind, a), predicate, (b_kind, b)))

    if note_ids:
        await run(
            select(Edge.source_id, Edge.predicate, Edge.target_id)
            .where(*_in_scope(scope), Edge.source_id.in_(note_ids))
            .order_by(Edge.source_id, Edge.created_at.desc()),
            "note",
            "note",
        )
        await run(
            select(Edge.target_id, Edge.predicate, Edge.source_id)
            .where(*_in_scope(scope), Edge.target_id.in_(note_ids))
            .order_by(Edge.target_id, Edge.created_at.desc()),
            "note",
            "note",
        )
        await run(
            select(Mention.note_id, literal("mentions"), Mention.entity_key)
            .where(*_mine(Mention, scope), Mention.note_id.in_(note_ids))
            .distinct()
            .order_by(Mention.note_id, Mention.entity_key),
            "note",
            "entity",
        )
    if keys:
        await run(
            select(Mention.entity_key, literal("mentioned_in"), Mention.note_id)
            .where(*_mine(Mention, scope), Mention.entity_key.in_(keys))
            .distinct()
            .order_by(Mention.entity_key, Mention.note_id),
            "entity",
            "note",
        )
        rel = GraphRelation
        await run(
            select(rel.subject_key, rel.predicate, rel.object_key)
            .where(*_mine(rel, scope), rel.subject_key.in_(keys))
            .distinct()
            .order_by(rel.subject_key, rel.predicate, rel.object_key),
            "entity",
            "entity",
        )
        await run(
            select(rel.object_key, rel.predicate, rel.subject_key)
            .where(*_mine(rel, scope), rel.object_key.in_(keys))
            .distinct()
            .order_by(rel.object_key, rel.predicate, rel.subject_key),
            "entity",
            "entity",
        )
    return out


def _mine(model: Any, scope: Scope) -> list[ColumnElement[bool]]:
    return [model.tenant_id == scope.tenant_id, model.project_id == scope.project_id]


async def replace_extraction(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    *,
    entities: Sequence[tuple[str, str, str]],
    mentions: Sequence[tuple[str, int, int]],
    relations: Sequence[tuple[str, str, str, int, int]],
) -> None:
    """Make these the note's extracted entities (key, name, kind), mentions
    (key, start, end) and relations (subject key, predicate, object key, start, end)."""
    for model in (Mention, GraphRelation):
        await session.execute(delete(model).where(*_mine(model, scope), model.note_id == note_id))
    base = {"tenant_id": scope.tenant_id, "project_id": scope.project_id}
    if entities:
        await session.execute(
            pg_insert(GraphEntity)
            .values([base | {"key": k, "name": n, "kind": kind} for k, n, kind in entities])
            .on_conflict_do_nothing()
        )
    if mentions:
        await session.execute(
            pg_insert(Mention)
            .values(
                [
                    base | {"note_id": note_id, "entity_key": k, "span_start": a, "span_end": b}
                    for k, a, b in mentions
                ]
            )
            .on_conflict_do_nothing()
        )
    if relations:
        await session.execute(
            pg_insert(GraphRelation)
            .values(
                [
                    base
                    | {
                        "note_id": note_id,
                        "subject_key": s,
                        "predicate": p,
                        "object_key": o,
                        "span_start": a,
                        "span_end": b,
                    }
                    for s, p, o, a, b in relations
                ]
            )
            .on_conflict_do_nothing()
        )


async def entity(session: AsyncSession, scope: Scope, key: str) -> GraphEntity | None:
    return await session.get(GraphEntity, (scope.tenant_id, scope.project_id, key))


async def entities_of_note(
    session: AsyncSession, scope: Scope, note_id: str
) -> list[tuple[GraphEntity, list[tuple[int, int]]]]:
    rows = await session.execute(
        select(GraphEntity, Mention.span_start, Mention.span_end)
        .join(
            Mention,
            and_(
                Mention.tenant_id == GraphEntity.tenant_id,
                Mention.project_id == GraphEntity.project_id,
                Mention.entity_key == GraphEntity.key,
            ),
        )
        .where(*_mine(Mention, scope), Mention.note_id == note_id)
        .order_by(Mention.span_start)
    )
    grouped: dict[str, tuple[GraphEntity, list[tuple[int, int]]]] = {}
    for ent, a, b in rows:
        grouped.setdefault(ent.key, (ent, []))[1].append((a, b))
    return list(grouped.values())


async def relations_of_note(
    session: AsyncSession, scope: Scope, note_id: str
) -> list[GraphRelation]:
    rows = await session.execute(
        select(GraphRelation)
        .where(*_mine(GraphRelation, scope), GraphRelation.note_id == note_id)
        .order_by(GraphRelation.span_start)
    )
    return list(rows.scalars())


async def notes_of_entity(
    session: AsyncSession, scope: Scope, key: str, *, limit: int
) -> list[tuple[str, int]]:
    """(note id, mentions) for the notes mentioning the entity, most mentions first."""
    rows = await session.execute(
        select(Mention.note_id, func.count())
        .where(*_mine(Mention, scope), Mention.entity_key == key)
        .group_by(Mention.note_id)
        .order_by(func.count().desc(), Mention.note_id)
        .limit(limit)
    )
    return [(r[0], int(r[1])) for r in rows]


async def search_entities(
    session: AsyncSession, scope: Scope, *, name: str | None, kind: str | None, limit: int
) -> list[tuple[GraphEntity, int]]:
    """Entities (with their number of mentioning notes), by name prefix and kind."""
    mentions = (
        select(func.count(func.distinct(Mention.note_id)))
        .where(
            Mention.tenant_id == GraphEntity.tenant_id,
            Mention.project_id == GraphEntity.project_id,
            Mention.entity_key == GraphEntity.key,
        )
        .scalar_subquery()
    )
    stmt = select(GraphEntity, mentions).where(*_mine(GraphEntity, scope))
    if name:
        stmt = stmt.where(func.lower(GraphEntity.name).startswith(name.lower(), autoescape=True))
    if kind:
        stmt = stmt.where(GraphEntity.kind == kind)
    rows = await session.execute(stmt.order_by(mentions.desc(), GraphEntity.key).limit(limit))
    return [(r[0], int(r[1])) for r in rows]


# -- export and statistics: whole tables, read in key order and capped ---------------
#
# Every reader takes ``limit`` and returns at most ``limit + 1`` rows, so the
# caller can tell a table that fits from one that was cut. Tag-scoped keys
# see only what row-level security lets them (entities, mentions, relations,
# edges and notes are all narrowed by it).


async def all_entities(
    session: AsyncSession, scope: Scope, *, limit: int
) -> list[tuple[str, str, str]]:
    """(key, name, kind), by key."""
    rows = await session.execute(
        select(GraphEntity.key, GraphEntity.name, GraphEntity.kind)
        .where(*_mine(GraphEntity, scope))
        .order_by(GraphEntity.key)
        .limit(limit + 1)
    )
    return [(k, n, kind) for k, n, kind in rows]


async def all_mentions(
    session: AsyncSession, scope: Scope, *, limit: int
) -> list[tuple[str, str, int, int]]:
    """(note id, entity key, span start, span end), by note and position."""
    rows = await session.execute(
        select(Mention.note_id, Mention.entity_key, Mention.span_start, Mention.span_end)
        .where(*_mine(Mention, scope))
        .order_by(Mention.note_id, Mention.span_start, Mention.entity_key)
        .limit(limit + 1)
    )
    return [(n, k, a, b) for n, k, a, b in rows]


async def all_relations(
    session: AsyncSession, scope: Scope, *, limit: int
) -> list[tuple[str, str, str, str, int, int]]:
    """(note id, subject key, predicate, object key, span start, span end)."""
    rel = GraphRelation
    rows = await session.execute(
        select(rel.note_id, rel.subject_key, rel.predicate, rel.object_key)
        .add_columns(rel.span_start, rel.span_end)
        .where(*_mine(rel, scope))
        .order_by(rel.note_id, rel.span_start, rel.subject_key, rel.predicate, rel.object_key)
        .limit(limit + 1)
    )
    return [(n, s, p, o, a, b) for n, s, p, o, a, b in rows]


async def all_edges(
    session: AsyncSession, scope: Scope, *, limit: int
) -> list[tuple[str, str, str, str]]:
    """Note edges (source id, predicate, target id, origin); a target may be
    a part id (``doc@P3``), as provenance edges are."""
    rows = await session.execute(
        select(Edge.source_id, Edge.predicate, Edge.target_id, Edge.origin)
        .where(*_in_scope(scope))
        .order_by(Edge.source_id, Edge.predicate, Edge.target_id)
        .limit(limit + 1)
    )
    return [(s, p, t, o) for s, p, t, o in rows]


def _tagged_notes(scope: Scope, key: str, exclude_source: str) -> list[ColumnElement[bool]]:
    """Notes carrying tag ``key`` (the GIN-indexed term), without system
    notes (ids starting with '.') and notes made by ``exclude_source``
    (stubs, which hold no content of their own)."""
    return [
        *_mine(Note, scope),
        Note.tag_index.contains([key]),
        ~Note.id.startswith("."),
        Note.source != exclude_source,
    ]


async def tag_values(
    session: AsyncSession, scope: Scope, *, key: str, exclude_source: str, limit: int
) -> list[tuple[str, Any]]:
    """(note id, the note's raw value of tag ``key``: a string or a list), by note id."""
    rows = await session.execute(
        select(Note.id, Note.tags[key])
        .where(*_tagged_notes(scope, key, exclude_source))
        .order_by(Note.id)
        .limit(limit + 1)
    )
    return [(i, v) for i, v in rows]


async def note_heads(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str], *, summary_chars: int
) -> dict[str, tuple[str, str]]:
    """{note id: (summary cut to ``summary_chars``, source)} for the ids that are notes."""
    out: dict[str, tuple[str, str]] = {}
    ids = sorted(set(note_ids))
    for i in range(0, len(ids), 5000):
        rows = await session.execute(
            select(Note.id, func.left(Note.summary, summary_chars), Note.source).where(
                *_mine(Note, scope), Note.id.in_(ids[i : i + 5000])
            )
        )
        out.update({n: (s, src) for n, s, src in rows})
    return out


async def graph_counts(session: AsyncSession, scope: Scope) -> dict[str, int]:
    """Row counts: mentions, relations, note edges and notes with a mention."""
    mentions, noted = (
        await session.execute(
            select(func.count(), func.count(func.distinct(Mention.note_id))).where(
                *_mine(Mention, scope)
            )
        )
    ).one()
    relations = await session.scalar(select(func.count()).where(*_mine(GraphRelation, scope)))
    edges = await session.scalar(select(func.count()).where(*_in_scope(scope)))
    return {
        "mentions": int(mentions),
        "notes_with_mentions": int(noted),
        "relations": int(relations or 0),
        "note_edges": int(edges or 0),
    }


async def entity_kinds(session: AsyncSession, scope: Scope) -> dict[str, int]:
    rows = await session.execute(
        select(GraphEntity.kind, func.count())
        .where(*_mine(GraphEntity, scope))
        .group_by(GraphEntity.kind)
        .order_by(GraphEntity.kind)
    )
    return {k: int(n) for k, n in rows}


async def predicate_counts(
    session: AsyncSession, scope: Scope, *, edges: bool, limit: int
) -> list[tuple[str, int]]:
    """The most used predicates of relations (or of note edges), most used first."""
    model: Any = Edge if edges else GraphRelation
    rows = await session.execute(
        select(model.predicate, func.count())
        .where(*_mine(model, scope))
        .group_by(model.predicate)
        .order_by(func.count().desc(), model.predicate)
        .limit(limit)
    )
    return [(p, int(n)) for p, n in rows]


async def most_mentioned(
    session: AsyncSession, scope: Scope, *, limit: int
) -> list[tuple[str, str, str, int]]:
    """(key, name, kind, mentioning notes) of the most-mentioned entities."""
    notes = func.count(func.distinct(Mention.note_id))
    counted = (
        select(Mention.entity_key.label("key"), notes.label("notes"))
        .where(*_mine(Mention, scope))
        .group_by(Mention.entity_key)
        .order_by(notes.desc(), Mention.entity_key)
        .limit(limit)
        .subquery()
    )
    rows = await session.execute(
        select(GraphEntity.key, GraphEntity.name, GraphEntity.kind, counted.c.notes)
        .join(counted, counted.c.key == GraphEntity.key)
        .where(*_mine(GraphEntity, scope))
        .order_by(counted.c.notes.desc(), GraphEntity.key)
    )
    return [(k, n, kind, int(c)) for k, n, kind, c in rows]


async def relation_pairs(
    session: AsyncSession, scope: Scope, *, limit: int
) -> list[tuple[str, str]]:
    """Distinct (subject, object) pairs of relations, at most ``limit + 1``."""
    rel = GraphRelation
    rows = await session.execute(
        select(rel.subject_key, rel.object_key)
        .where(*_mine(rel, scope))
        .distinct()
        .order_by(rel.subject_key, rel.object_key)
        .limit(limit + 1)
    )
    return [(s, o) for s, o in rows]


async def tag_value_counts(
    session: AsyncSession, scope: Scope, *, key: str, exclude_source: str, limit: int
) -> tuple[int, int, list[tuple[str, int]]]:
    """For tag ``key``: (notes carrying it, distinct values, the ``limit`` values
    most notes carry with their counts). Values come from the tag index, so
    they are case-folded, as tag filters compare them."""
    where = _tagged_notes(scope, key, exclude_source)
    notes = await session.scalar(select(func.count()).select_from(Note).where(*where))
    unnested = (
        func.unnest(Note.tag_index).table_valued("term", joins_implicitly=True).render_derived("t")
    )
    terms = (
        select(unnested.c.term)
        .select_from(Note)
        .where(*where, unnested.c.term.startswith(f"{key}="))
        .subquery()
    )
    distinct = await session.scalar(select(func.count(func.distinct(terms.c.term))))
    rows = await session.execute(
        select(terms.c.term, func.count())
        .group_by(terms.c.term)
        .order_by(func.count().desc(), terms.c.term)
        .limit(limit)
    )
    top = [(t.split("=", 1)[1], int(n)) for t, n in rows]
    return int(notes or 0), int(distinct or 0), top
