"""The graph extraction's SQL (entities, mentions, relations) and the walk
over the whole graph (note edges read from the notes domain's ``edges``
table, mentions and relations) that deep find and the graph API use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Edge, GraphEntity, GraphRelation, Mention
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
