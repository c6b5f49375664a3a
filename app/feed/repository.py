"""The mutation change feed, written in the same transaction as the mutation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.context import journal_var
from app.models import Change


async def record(
    session: AsyncSession,
    scope: Scope,
    *,
    mutation: str,
    entity_id: str,
    payload: dict[str, Any] | None = None,
) -> None:
    _journal([entity_id])
    await session.execute(
        insert(Change).values(
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            mutation=mutation,
            entity_id=entity_id,
            payload=payload or {},
        )
    )


async def record_many(
    session: AsyncSession, scope: Scope, *, mutation: str, entity_ids: Sequence[str]
) -> None:
    """One change of the same kind for each entity, in one statement."""
    if not entity_ids:
        return
    _journal(entity_ids)
    await session.execute(
        insert(Change),
        [
            {
                "tenant_id": scope.tenant_id,
                "project_id": scope.project_id,
                "mutation": mutation,
                "entity_id": entity_id,
                "payload": {},
            }
            for entity_id in entity_ids
        ],
    )


async def after(session: AsyncSession, scope: Scope, *, cursor: int, limit: int) -> list[Change]:
    """The project's changes after ``cursor`` (a change id), oldest first."""
    rows = await session.execute(
        select(Change)
        .where(
            Change.tenant_id == scope.tenant_id,
            Change.project_id == scope.project_id,
            Change.id > cursor,
        )
        .order_by(Change.id)
        .limit(limit)
    )
    return list(rows.scalars())


async def head(session: AsyncSession, scope: Scope) -> int:
    """The newest change id of the project (0 when none)."""
    newest = await session.scalar(
        select(func.max(Change.id)).where(
            Change.tenant_id == scope.tenant_id, Change.project_id == scope.project_id
        )
    )
    return int(newest or 0)


def _journal(entity_ids: Sequence[str]) -> None:
    """Note the request's changed notes for its audit entry (ids only)."""
    journal = journal_var.get()
    if journal is not None and len(journal.notes) < 1000:
        journal.notes.extend(entity_ids[: 1000 - len(journal.notes)])
