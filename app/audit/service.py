"""The audit trail: reading it, and dropping what is past the retention.
(What requests record is ``app.audit.http``.)"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.audit import repository as repo
from app.db import Database
from app.kit.timeutil import utcnow
from app.models import AuditLog
from app.tenancy import TenantScope


async def entries(
    session: AsyncSession, scope: TenantScope, *, query: repo.AuditQuery
) -> Sequence[AuditLog]:
    return await repo.entries(session, scope, query)


async def prune_expired(db: Database, *, retention_days: int) -> int:
    """Drop entries older than the retention (the sweeper, every few minutes)."""
    async with tenancy.system_transaction(db) as session:
        return await repo.prune_all_before(session, utcnow() - timedelta(days=retention_days))


def view(row: AuditLog) -> dict[str, Any]:
    return {
        "id": row.id,
        "at": row.created_at,
        "actor": row.actor,
        "action": row.action,
        "target": row.target,
        "project_id": row.project_id,
        "outcome": row.outcome,
        "request_id": row.request_id,
        "detail": row.detail,
    }


async def erase(
    session: AsyncSession, tenant: TenantScope, *, project_id: uuid.UUID | None = None
) -> int:
    """Drop a tenant's trail (or one project's), for its erasure."""
    return await repo.prune(session, tenant, project_id=project_id)
