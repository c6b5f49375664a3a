"""The edges table: links between notes made by edge tags (a tag whose
``.tag/<key>`` doc names an ``_inverse``, origin ``tag``) and provenance
edges (``derived_from``, origin ``provenance``: a distilled memory to the
passages it came from; a target may be a part, ``ID@P{N}``). Each origin is
written on its own: a tag sync replaces tag edges and leaves the others."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Edge, Note
from app.tenancy import Scope

TAG = "tag"


def _in_scope(scope: Scope) -> list[ColumnElement[bool]]:
    return [Edge.tenant_id == scope.tenant_id, Edge.project_id == scope.project_id]


async def inverse_verbs(session: AsyncSession, scope: Scope, keys: Iterable[str]) -> dict[str, str]:
    """{tag key: inverse verb} for the keys whose ``.tag/<key>`` doc makes them edge tags."""
    ids = [f".tag/{k}" for k in keys]
    if not ids:
        return {}
    rows = await session.execute(
        select(Note.id, Note.tags).where(
            Note.tenant_id == scope.tenant_id,
            Note.project_id == scope.project_id,
            Note.id.in_(ids),
        )
    )
    out: dict[str, str] = {}
    for note_id, tags in rows:
        verb = (tags or {}).get("_inverse")
        if isinstance(verb, str) and verb:
            out[note_id.removeprefix(".tag/")] = verb
    return out


async def replace_from(
    session: AsyncSession,
    scope: Scope,
    source_id: str,
    edges: Sequence[tuple[str, str]],
    *,
    origin: str = TAG,
) -> None:
    """Make ``(predicate, target)`` the note's edges of this origin."""
    await session.execute(
        delete(Edge).where(*_in_scope(scope), Edge.source_id == source_id, Edge.origin == origin)
    )
    await _insert(session, scope, source_id, edges, origin=origin)


async def add_edges(
    session: AsyncSession,
    scope: Scope,
    source_id: str,
    edges: Sequence[tuple[str, str]],
    *,
    origin: str,
) -> None:
    """Add ``(predicate, target)`` edges of this origin to the note, keeping
    every edge it has (provenance accumulates; tag edges are replaced)."""
    await _insert(session, scope, source_id, edges, origin=origin)


async def _insert(
    session: AsyncSession,
    scope: Scope,
    source_id: str,
    edges: Sequence[tuple[str, str]],
    *,
    origin: str,
) -> None:
    if not edges:
        return
    await session.execute(
        pg_insert(Edge)
        .values(
            [
                {
                    "tenant_id": scope.tenant_id,
                    "project_id": scope.project_id,
                    "source_id": source_id,
                    "predicate": predicate,
                    "target_id": target,
                    "origin": origin,
                }
                for predicate, target in edges
            ]
        )
        .on_conflict_do_nothing()
    )


async def delete_from(session: AsyncSession, scope: Scope, source_id: str) -> None:
    await session.execute(delete(Edge).where(*_in_scope(scope), Edge.source_id == source_id))


async def edges_into(
    session: AsyncSession, scope: Scope, target_id: str, *, limit: int
) -> list[tuple[str, str, str, datetime]]:
    """Tag edges pointing at a note: (source id, predicate, source summary,
    source updated_at), newest source first."""
    rows = await session.execute(
        select(Edge.source_id, Edge.predicate, Note.summary, Note.updated_at)
        .join(
            Note,
            and_(
                Note.tenant_id == Edge.tenant_id,
                Note.project_id == Edge.project_id,
                Note.id == Edge.source_id,
            ),
        )
        .where(*_in_scope(scope), Edge.target_id == target_id, Edge.origin == TAG)
        .order_by(Note.updated_at.desc(), Edge.source_id)
        .limit(limit)
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]


async def targets_from(
    session: AsyncSession, scope: Scope, source_id: str, *, predicate: str, origin: str, limit: int
) -> list[str]:
    """The targets of the note's edges of this predicate and origin, in id order."""
    rows = await session.scalars(
        select(Edge.target_id)
        .where(
            *_in_scope(scope),
            Edge.source_id == source_id,
            Edge.predicate == predicate,
            Edge.origin == origin,
        )
        .order_by(Edge.target_id)
        .limit(limit)
    )
    return list(rows)


async def sources_into(
    session: AsyncSession,
    scope: Scope,
    target_id: str,
    *,
    predicate: str,
    origin: str,
    parts: bool,
    limit: int,
) -> list[tuple[str, str, str, datetime]]:
    """Edges of this predicate and origin pointing at a note (and, with
    ``parts``, at any of its parts ``ID@P{N}``): (source id, target id,
    source summary, source updated_at), newest source first."""
    at = Edge.target_id == target_id
    if parts:
        at = or_(at, Edge.target_id.startswith(target_id + "@P{", autoescape=True))
    rows = await session.execute(
        select(Edge.source_id, Edge.target_id, Note.summary, Note.updated_at)
        .join(
            Note,
            and_(
                Note.tenant_id == Edge.tenant_id,
                Note.project_id == Edge.project_id,
                Note.id == Edge.source_id,
            ),
        )
        .where(*_in_scope(scope), at, Edge.predicate == predicate, Edge.origin == origin)
        .order_by(Note.updated_at.desc(), Edge.source_id, Edge.target_id)
        .limit(limit)
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]
