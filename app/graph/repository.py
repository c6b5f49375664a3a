"""All SQL of the note graph: edges between notes (from edge tags now, from
graph extraction later), walked by deep find."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.models import Edge, Note

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
    if edges:
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


async def neighbours(
    session: AsyncSession, scope: Scope, ids: Sequence[str], *, per_node: int
) -> list[tuple[str, str, str]]:
    """Edges touching ``ids`` in either direction: (from, predicate, to), where
    ``from`` is the id in ``ids``; at most ``per_node`` each way per id."""
    if not ids:
        return []
    out: list[tuple[str, str, str]] = []
    forward = await session.execute(
        select(Edge.source_id, Edge.predicate, Edge.target_id)
        .where(*_in_scope(scope), Edge.source_id.in_(list(ids)))
        .order_by(Edge.source_id, Edge.created_at.desc())
    )
    backward = await session.execute(
        select(Edge.target_id, Edge.predicate, Edge.source_id)
        .where(*_in_scope(scope), Edge.target_id.in_(list(ids)))
        .order_by(Edge.target_id, Edge.created_at.desc())
    )
    for rows in (forward, backward):
        seen: dict[str, int] = {}
        for a, predicate, b in rows:
            if seen.get(a, 0) < per_node:
                seen[a] = seen.get(a, 0) + 1
                out.append((a, predicate, b))
    return out
