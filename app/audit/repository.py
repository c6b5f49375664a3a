"""All SQL touching audit_log: appended in the same transaction as what it
records, read by the audit API, pruned and erased only through SECURITY
DEFINER functions (the application role cannot update or delete it)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import AuditLog
from app.request_vars import journal_var, request_id_var
from app.tenancy import TenantScope


async def record(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    actor: str,
    action: str,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
    project_id: uuid.UUID | None = None,
    outcome: str = "ok",
) -> None:
    journal = journal_var.get()
    if journal is not None:
        journal.recorded = True
    await session.execute(
        insert(AuditLog).values(
            tenant_id=tenant.tenant_id,
            actor=actor,
            action=action,
            target=target,
            detail=detail or {},
            request_id=request_id_var.get(),
            project_id=project_id or getattr(tenant, "project_id", None),
            outcome=outcome,
        )
    )


@dataclass(frozen=True, slots=True)
class AuditQuery:
    action: str | None = None  # a prefix: "key." matches key.create and key.revoke
    actor: str | None = None
    target: str | None = None
    outcome: str | None = None  # "ok", or "error" for every failure
    project_id: uuid.UUID | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None  # the paging position (an internal id): entries older
    limit: int = 100


async def entries(session: AsyncSession, tenant: TenantScope, q: AuditQuery) -> Sequence[AuditLog]:
    """The tenant's entries, newest first."""
    stmt = select(AuditLog).where(AuditLog.tenant_id == tenant.tenant_id)
    if q.action:
        stmt = stmt.where(AuditLog.action.startswith(q.action, autoescape=True))
    if q.actor:
        stmt = stmt.where(AuditLog.actor == q.actor)
    if q.target:
        stmt = stmt.where(AuditLog.target == q.target)
    if q.outcome == "ok":
        stmt = stmt.where(AuditLog.outcome == "ok")
    elif q.outcome:
        stmt = stmt.where(AuditLog.outcome != "ok")
    if q.project_id:
        stmt = stmt.where(AuditLog.project_id == q.project_id)
    if q.since:
        stmt = stmt.where(AuditLog.created_at >= q.since)
    if q.until:
        stmt = stmt.where(AuditLog.created_at < q.until)
    if q.before_id is not None:
        stmt = stmt.where(AuditLog.id < q.before_id)
    stmt = stmt.order_by(AuditLog.id.desc()).limit(q.limit)
    return (await session.scalars(stmt)).all()


async def position(session: AsyncSession, tenant: TenantScope, public_id: uuid.UUID) -> int | None:
    """The internal id of the tenant's entry with this public id, if kept."""
    return await session.scalar(
        select(AuditLog.id).where(
            AuditLog.tenant_id == tenant.tenant_id, AuditLog.public_id == public_id
        )
    )


async def prune(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    project_id: uuid.UUID | None = None,
    before: datetime | None = None,
) -> int:
    """Delete a tenant's entries (of one project, older than ``before``)."""
    n = await session.scalar(
        text("SELECT keepmem_prune_audit(:t, :p, :b)"),
        {"t": tenant.tenant_id, "p": project_id, "b": before},
    )
    return int(n or 0)


async def prune_all_before(session: AsyncSession, before: datetime) -> int:
    """Delete every tenant's entries older than ``before`` (system transaction)."""
    n = await session.scalar(text("SELECT keepmem_prune_audit(NULL, NULL, :b)"), {"b": before})
    return int(n or 0)
