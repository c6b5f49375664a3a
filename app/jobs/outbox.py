"""The job outbox's lifecycle, for the worker machinery (``app.pipeline``):
dispatching queued rows, claiming them with a lease, keeping the lease,
finishing or failing them, and sweeping leases that ran out. Domains that
queue work call ``repository.enqueue`` in their own transaction; everything
else that writes the jobs table goes through here (one owner: the jobs
package)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.jobs import repository as repo
from app.jobs.kinds import JobKind
from app.models import Job
from app.tenancy import Scope, TenantScope


async def cancel_for_note(
    session: AsyncSession, scope: Scope, *, note_id: str, kind: JobKind | None = None
) -> None:
    """Cancel the note's open jobs (of one kind): the note was deleted or moved on."""
    await repo.cancel_for_note(session, scope, note_id, kind=kind)


async def mark_dispatched(session: AsyncSession, jobs: Sequence[Job]) -> None:
    """These rows are on the queue now."""
    await repo.mark_dispatched(session, jobs)


async def sweep_stale(
    session: AsyncSession, *, lease_seconds: float, dispatch_timeout_seconds: float
) -> int:
    """Put back jobs whose lease or dispatch ran out; how many."""
    return await repo.sweep_stale(
        session, lease_seconds=lease_seconds, dispatch_timeout_seconds=dispatch_timeout_seconds
    )


async def claim_many(
    session: AsyncSession, tenant: TenantScope, *, job_ids: Sequence[int], token: uuid.UUID
) -> list[Job]:
    """Claim these jobs under a lease token; the ones this worker got."""
    return await repo.claim_many(session, tenant, job_ids, token)


async def heartbeat_many(
    session: AsyncSession, tenant: TenantScope, *, job_ids: Sequence[int], token: uuid.UUID
) -> int:
    """Extend the lease of jobs still held with this token."""
    return await repo.heartbeat_many(session, tenant, job_ids, token)


async def finish(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    job_id: int,
    token: uuid.UUID,
    result: dict[str, Any] | None,
) -> bool:
    """Mark a held job done; False when the lease was lost."""
    return await repo.finish(session, tenant, job_id, token, result=result)


async def finish_many(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    job_ids: Sequence[int],
    token: uuid.UUID,
    result: dict[str, Any] | None,
) -> int:
    """Mark held jobs done; how many still held."""
    return await repo.finish_many(session, tenant, job_ids, token, result=result)


async def fail(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    job_id: int,
    token: uuid.UUID,
    error: str,
    retry_in_seconds: float | None,
) -> bool:
    """Record a failure: retried after ``retry_in_seconds``, or dead when None."""
    return await repo.fail(
        session, tenant, job_id, token, error=error, retry_in_seconds=retry_in_seconds
    )
