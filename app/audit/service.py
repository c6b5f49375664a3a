"""The audit trail: reading it, and dropping what is past the retention.
(What requests record is ``app.audit.http``.)"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.audit import repository as repo
from app.db import Database
from app.kit import cursors
from app.kit.timeutil import utcnow
from app.models import AuditLog
from app.tenancy import TenantScope


@dataclass(frozen=True, slots=True)
class Page:
    entries: Sequence[AuditLog]
    next_cursor: str | None  # the public id of the last entry, when more may follow


async def entries(
    session: AsyncSession, scope: TenantScope, *, query: repo.AuditQuery, cursor: str | None
) -> Page:
    """A page of the tenant's trail, newest first, older than ``cursor``
    (the ``next_cursor`` of the page before), looked up in the tenant's own
    entries. A cursor whose entry is gone (dropped by the retention, erased
    with its project) or is not the tenant's is a 400 ``cursor_expired``:
    its place in the trail is lost, so the reader starts again from the
    newest (``until`` narrows)."""
    if cursor is not None:
        before = await repo.position(session, scope, cursors.parse(cursor))
        if before is None:
            raise cursors.expired("cursor", cursor, restart="read again without a cursor")
        query = replace(query, before_id=before)
    rows = await repo.entries(session, scope, query)
    last = rows[-1] if rows and len(rows) == query.limit else None
    return Page(entries=rows, next_cursor=cursors.show(last.public_id) if last else None)


async def prune_expired(db: Database, *, retention_days: int) -> int:
    """Drop entries older than the retention (the sweeper, every few minutes)."""
    async with tenancy.system_transaction(db) as session:
        return await repo.prune_all_before(session, utcnow() - timedelta(days=retention_days))


def view(row: AuditLog) -> dict[str, Any]:
    return {
        "id": cursors.show(row.public_id),
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
