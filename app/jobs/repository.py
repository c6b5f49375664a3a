"""All SQL touching the job outbox."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.jobs.kinds import JobKind, JobStatus
from app.models import Job


async def enqueue(
    session: AsyncSession,
    scope: Scope,
    *,
    kind: JobKind,
    note_id: str | None,
    payload: dict[str, Any] | None = None,
    priority: int = 5,
) -> int:
    """Add a job in the caller's transaction; newer work supersedes pending work.

    Only ``pending`` rows are superseded: a job a worker already holds runs to
    the end and finds, by the note's content hash, that it is stale.
    """
    if note_id is not None:
        await cancel_for_note(session, scope, note_id, kind=kind)
    job_id = await session.scalar(
        insert(Job)
        .values(
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            kind=kind.value,
            note_id=note_id,
            payload=payload or {},
            priority=priority,
        )
        .returning(Job.id)
    )
    assert job_id is not None
    return int(job_id)


async def cancel_for_note(
    session: AsyncSession, scope: Scope, note_id: str, *, kind: JobKind | None = None
) -> None:
    """Supersede a note's pending work (of one kind, or all of it, when the note goes)."""
    stmt = update(Job).where(
        Job.tenant_id == scope.tenant_id,
        Job.project_id == scope.project_id,
        Job.note_id == note_id,
        Job.status == JobStatus.PENDING.value,
    )
    if kind is not None:
        stmt = stmt.where(Job.kind == kind.value)
    await session.execute(stmt.values(status=JobStatus.SUPERSEDED.value, updated_at=func.now()))


async def open_kinds_by_note(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str]
) -> dict[str, list[str]]:
    """Kinds of unfinished jobs per note, for the note's processing status."""
    if not note_ids:
        return {}
    rows = await session.execute(
        select(Job.note_id, Job.kind)
        .where(
            Job.tenant_id == scope.tenant_id,
            Job.project_id == scope.project_id,
            Job.note_id.in_(list(note_ids)),
            Job.status.in_(
                [JobStatus.PENDING.value, JobStatus.DISPATCHED.value, JobStatus.RUNNING.value]
            ),
        )
        .distinct()
    )
    out: dict[str, list[str]] = {}
    for note_id, kind in rows:
        if note_id is not None:
            out.setdefault(note_id, []).append(kind)
    return out
