"""The mutation change feed, written in the same transaction as the mutation."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.models import Change


async def record(
    session: AsyncSession,
    scope: Scope,
    *,
    mutation: str,
    entity_id: str,
    payload: dict[str, Any] | None = None,
) -> None:
    await session.execute(
        insert(Change).values(
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            mutation=mutation,
            entity_id=entity_id,
            payload=payload or {},
        )
    )
