"""Audit log writes: who did what to which tenant, with the request id."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import TenantScope
from app.context import request_id_var
from app.models import AuditLog


async def record(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    actor: str,
    action: str,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    await session.execute(
        insert(AuditLog).values(
            tenant_id=tenant.tenant_id,
            actor=actor,
            action=action,
            target=target,
            detail=detail or {},
            request_id=request_id_var.get(),
        )
    )
