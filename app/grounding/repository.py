"""The citations table (migration 0018): what agents cited, as they cited it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Citation
from app.tenancy import Scope


def _mine(scope: Scope) -> Any:
    return and_(Citation.tenant_id == scope.tenant_id, Citation.project_id == scope.project_id)


async def add(session: AsyncSession, scope: Scope, values: dict[str, Any]) -> Citation:
    """Store a citation; one with the same id (the same span of the same
    text) is kept as it was. Returns the stored row."""
    await session.execute(
        insert(Citation)
        .values(tenant_id=scope.tenant_id, project_id=scope.project_id, **values)
        .on_conflict_do_nothing(index_elements=["tenant_id", "project_id", "id"])
    )
    row = await get(session, scope, str(values["id"]))
    assert row is not None
    return row


async def get(session: AsyncSession, scope: Scope, citation_id: str) -> Citation | None:
    return await session.scalar(select(Citation).where(_mine(scope), Citation.id == citation_id))


async def get_many(
    session: AsyncSession, scope: Scope, citation_ids: Sequence[str]
) -> dict[str, Citation]:
    if not citation_ids:
        return {}
    rows = await session.scalars(
        select(Citation).where(_mine(scope), Citation.id.in_(list(citation_ids)))
    )
    return {c.id: c for c in rows}


async def page(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str | None,
    limit: int,
    before: tuple[Any, str] | None,
) -> list[Citation]:
    """Newest first; ``before`` is the (created_at, id) of the last one seen."""
    stmt = select(Citation).where(_mine(scope))
    if note_id is not None:
        stmt = stmt.where(Citation.note_id == note_id)
    if before is not None:
        at, last = before
        stmt = stmt.where(
            (Citation.created_at < at) | ((Citation.created_at == at) & (Citation.id < last))
        )
    stmt = stmt.order_by(Citation.created_at.desc(), Citation.id.desc()).limit(limit)
    return list((await session.scalars(stmt)).all())


async def remove(session: AsyncSession, scope: Scope, citation_id: str) -> bool:
    result = await session.execute(
        delete(Citation).where(_mine(scope), Citation.id == citation_id).returning(Citation.id)
    )
    return result.first() is not None
