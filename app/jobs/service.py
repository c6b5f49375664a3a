"""Jobs as users see them: list, inspect, retry; and keep's task delegation."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, JobNotDead, JobNotFound, PayloadTooLarge, TaskNotFound
from app.jobs import repository as repo
from app.jobs.kinds import JobKind, JobStatus
from app.kit import redaction
from app.models import Job
from app.tenancy import Scope
from app.tenants import service as tenants

TASK_TYPES = ("summarize", "analyze")


async def list_jobs(
    session: AsyncSession,
    scope: Scope,
    *,
    status: str | None,
    kind: str | None,
    note_id: str | None,
    limit: int,
    before: str | None,
) -> Sequence[Job]:
    if status is not None and status not in {s.value for s in JobStatus}:
        raise BadRequest(f"status must be one of {', '.join(s.value for s in JobStatus)}")
    if kind is not None and kind not in {k.value for k in JobKind}:
        raise BadRequest(f"kind must be one of {', '.join(k.value for k in JobKind)}")
    if not 1 <= limit <= 500:
        raise BadRequest("limit must be between 1 and 500")
    before_id = None
    if before is not None:
        before_id = parse_public_id(before)
        if before_id is None:
            raise BadRequest(f"before must be a job id from this list: {before[:80]!r}")
    return await repo.list_jobs(
        session, scope, status=status, kind=kind, note_id=note_id, limit=limit, before=before_id
    )


def parse_public_id(raw: str) -> uuid.UUID | None:
    """A job or task id as the API shows it (a UUID), or None."""
    try:
        return uuid.UUID(raw) if len(raw) <= 45 else None
    except ValueError:
        return None


async def get_job(session: AsyncSession, scope: Scope, *, job_id: str) -> Job:
    public_id = parse_public_id(job_id)
    job = await repo.get(session, scope, public_id) if public_id is not None else None
    if job is None:
        raise JobNotFound(f"job not found: {job_id[:80]}")
    return job


async def retry_job(session: AsyncSession, scope: Scope, *, job_id: str) -> Job:
    """Put a dead-lettered job back in the queue with fresh attempts."""
    job = await get_job(session, scope, job_id=job_id)
    if job.status != JobStatus.DEAD.value:
        raise JobNotDead(f"job {job_id} is {job.status}; only dead jobs can be retried")
    requeued = await repo.requeue(session, scope, job.public_id)
    assert requeued is not None
    return requeued


async def create_task(
    session: AsyncSession,
    scope: Scope,
    *,
    task_type: str,
    content: str,
    metadata: dict[str, Any] | None,
    max_chars: int,
) -> uuid.UUID:
    """keep's ``POST /v1/tasks``: work on content sent by a local keep; returns its id."""
    if task_type not in TASK_TYPES:
        raise BadRequest(f"task_type must be one of {', '.join(TASK_TYPES)}")
    if not content.strip():
        raise BadRequest("content is empty")
    if len(content) > max_chars:
        raise PayloadTooLarge(f"content is {len(content)} characters; the limit is {max_chars}")
    if await tenants.sanitizing(session, scope):
        content = redaction.clean(content)
    job_id = await repo.enqueue(
        session,
        scope,
        kind=JobKind.TASK,
        note_id=None,
        payload={"task_type": task_type, "content": content, "metadata": metadata or {}},
    )
    return await repo.public_id_of(session, scope, job_id)


def task_status(job: Job) -> str:
    return {
        JobStatus.PENDING.value: "queued",
        JobStatus.DISPATCHED.value: "queued",
        JobStatus.RUNNING.value: "processing",
        JobStatus.DONE.value: "completed",
        JobStatus.DEAD.value: "failed",
        JobStatus.SUPERSEDED.value: "failed",
    }[job.status]


async def get_task(session: AsyncSession, scope: Scope, *, task_id: str) -> Job:
    public_id = parse_public_id(task_id)
    job = await repo.get(session, scope, public_id) if public_id is not None else None
    if job is None or job.kind != JobKind.TASK.value:
        raise TaskNotFound(f"task not found: {task_id[:80]}")
    return job


async def delete_task(session: AsyncSession, scope: Scope, *, task_id: str) -> None:
    job = await get_task(session, scope, task_id=task_id)
    await repo.delete_job(session, scope, job.public_id)
