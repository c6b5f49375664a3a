"""Webhooks: a project's subscribers and how far each has been handed changes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Change, Webhook
from app.tenancy import Scope


def _mine(scope: Scope) -> list[Any]:
    return [Webhook.tenant_id == scope.tenant_id, Webhook.project_id == scope.project_id]


async def create(session: AsyncSession, scope: Scope, *, values: dict[str, Any]) -> Webhook:
    row = Webhook(tenant_id=scope.tenant_id, project_id=scope.project_id, **values)
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row


async def list_for(session: AsyncSession, scope: Scope) -> list[Webhook]:
    rows = await session.execute(select(Webhook).where(*_mine(scope)).order_by(Webhook.created_at))
    return list(rows.scalars())


async def count(session: AsyncSession, scope: Scope) -> int:
    stmt = select(func.count()).select_from(Webhook).where(*_mine(scope))
    return int(await session.scalar(stmt) or 0)


async def get(
    session: AsyncSession, scope: Scope, webhook_id: uuid.UUID, *, lock: bool = False
) -> Webhook | None:
    stmt = select(Webhook).where(*_mine(scope), Webhook.id == webhook_id)
    if lock:
        stmt = stmt.with_for_update(skip_locked=True)
    return (await session.execute(stmt)).scalar_one_or_none()


async def change(
    session: AsyncSession, scope: Scope, webhook_id: uuid.UUID, *, values: dict[str, Any]
) -> Webhook | None:
    if not values:  # "UPDATE ... SET WHERE" is not SQL
        return await get(session, scope, webhook_id)
    await session.execute(
        update(Webhook).where(*_mine(scope), Webhook.id == webhook_id).values(**values)
    )
    return await get(session, scope, webhook_id)


async def remove(session: AsyncSession, scope: Scope, webhook_id: uuid.UUID) -> bool:
    done = await session.execute(
        delete(Webhook).where(*_mine(scope), Webhook.id == webhook_id).returning(Webhook.id)
    )
    return done.scalar_one_or_none() is not None


Due = tuple[uuid.UUID, uuid.UUID, uuid.UUID]


async def due(session: AsyncSession, *, limit: int) -> Sequence[Due]:
    """(tenant, project, webhook) of active webhooks with changes past their
    cursor, every tenant's (a system transaction: the fan-out)."""
    newer = exists().where(
        Change.tenant_id == Webhook.tenant_id,
        Change.project_id == Webhook.project_id,
        Change.id > Webhook.cursor,
        Change.kind.is_not(None),
    )
    rows = await session.execute(
        select(Webhook.tenant_id, Webhook.project_id, Webhook.id)
        .where(Webhook.active, newer)
        .limit(limit)
    )
    return [(t, p, w) for t, p, w in rows.all()]
