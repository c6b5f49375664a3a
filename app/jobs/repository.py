"""All SQL touching the job outbox."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Params, driver
from app.jobs.kinds import JobKind, JobStatus, Lane
from app.models import Job
from app.tenancy import Scope, TenantScope

#: Statuses counted by the metrics (done and superseded rows are history).
OPEN_AND_DEAD = ("pending", "dispatched", "running", "dead")


async def enqueue(
    session: AsyncSession,
    scope: Scope,
    *,
    kind: JobKind,
    note_id: str | None,
    payload: dict[str, Any] | None = None,
    priority: int = 5,
    supersede: bool = True,
    max_attempts: int | None = None,
) -> int:
    """Add a job in the caller's transaction; newer work supersedes pending work.

    Only ``pending`` rows are superseded: a job a worker already holds runs to
    the end and finds, by the note's content hash, that it is stale.
    """
    if note_id is not None and supersede:
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
            **({"max_attempts": max_attempts} if max_attempts is not None else {}),
        )
        .returning(Job.id)
    )
    assert job_id is not None
    return int(job_id)


async def enqueue_new(
    session: AsyncSession, scope: Scope, jobs: Sequence[tuple[JobKind, str, dict[str, Any], int]]
) -> None:
    """Jobs (kind, note id, payload, priority) for notes that had no work yet
    (new notes: nothing to supersede), in one statement."""
    if not jobs:
        return
    await session.execute(
        insert(Job),
        [
            {
                "tenant_id": scope.tenant_id,
                "project_id": scope.project_id,
                "kind": kind.value,
                "note_id": note_id,
                "payload": payload,
                "priority": priority,
            }
            for kind, note_id, payload, priority in jobs
        ],
    )


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


# -- dispatch (system context: every tenant's jobs) ----------------------------------

_OPEN = (JobStatus.PENDING.value, JobStatus.DISPATCHED.value, JobStatus.RUNNING.value)


BACKGROUND_PRIORITY = 9  # graph extraction, term counts: after everything else
#: Kinds that wait on someone else's server (a tarpit holds them to their timeout).
REMOTE_KINDS = (JobKind.WEBHOOK.value, JobKind.FETCH.value, JobKind.CRAWL.value)

#: A job's lane (app.jobs.kinds.Lane) in SQL.
LANE = case(
    (Job.kind.in_(REMOTE_KINDS), Lane.REMOTE.value),
    (Job.priority >= BACKGROUND_PRIORITY, Lane.BACKGROUND.value),
    else_=Lane.FOREGROUND.value,
)


def lane_of(job: Job) -> Lane:
    """The lane of a job (as LANE says in SQL)."""
    if job.kind in REMOTE_KINDS:
        return Lane.REMOTE
    return Lane.BACKGROUND if job.priority >= BACKGROUND_PRIORITY else Lane.FOREGROUND


@dataclass(frozen=True, slots=True)
class LaneCap:
    """How many jobs of a slow lane may be in flight: in all, and per tenant."""

    total: int
    per_tenant: int


async def inflight_by_lane(session: AsyncSession) -> dict[tuple[uuid.UUID, Lane], int]:
    """Jobs handed to workers and not finished, by tenant and lane."""
    rows = await session.execute(
        select(Job.tenant_id, LANE, func.count())
        .where(Job.status.in_([JobStatus.DISPATCHED.value, JobStatus.RUNNING.value]))
        .group_by(Job.tenant_id, LANE)
    )
    return {(tenant_id, Lane(lane)): int(n) for tenant_id, lane, n in rows.all()}


async def take_ready_fairly(
    session: AsyncSession,
    *,
    slots: int,
    caps: Mapping[Lane, LaneCap] | None = None,
    busy: Mapping[tuple[uuid.UUID, Lane], int] | None = None,
) -> list[Job]:
    """Lock up to ``slots`` ready jobs, spread evenly over the tenants that have any.

    Each tenant with ready work gets ``ceil(slots / tenants)`` of its oldest
    highest-priority jobs, so one tenant's import cannot starve another's put.
    A slow lane in ``caps`` gets no more than its cap in flight, counting
    ``busy`` (in flight already, by tenant and lane): in all, and per tenant.
    So background work and deliveries never fill the workers' slots ahead of
    the next put's embedding, and one tenant's slow work takes only its share.
    Rows locked by another dispatcher are skipped; rows taken but not
    returned stay pending.
    """
    if slots <= 0:
        return []
    caps = caps or {}
    held = dict(busy or {})
    lane_held = {lane: sum(n for (_, ln), n in held.items() if ln == lane) for lane in caps}

    def room(tenant_id: uuid.UUID, lane: Lane) -> int:
        cap = caps.get(lane)
        if cap is None:
            return slots
        return min(cap.total - lane_held[lane], cap.per_tenant - held.get((tenant_id, lane), 0))

    # Tenants with ready work, those waiting longest first, at most one per slot.
    tenants = (
        (
            await session.execute(
                select(Job.tenant_id)
                .where(Job.status == JobStatus.PENDING.value, Job.next_run_at <= func.now())
                .group_by(Job.tenant_id)
                .order_by(func.min(Job.next_run_at))
                .limit(slots)
            )
        )
        .scalars()
        .all()
    )
    if not tenants:
        return []
    taken: list[Job] = []
    hungry = list(tenants)
    # Rounds: an even share each; what a tenant cannot use goes to the others.
    while hungry and len(taken) < slots:
        share = max(1, -(-(slots - len(taken)) // len(hungry)))
        still_hungry = []
        for tenant_id in hungry:
            stmt = (
                select(Job)
                .where(
                    Job.tenant_id == tenant_id,
                    Job.status == JobStatus.PENDING.value,
                    Job.next_run_at <= func.now(),
                )
                .order_by(Job.priority, Job.id)
                .limit(share)
                .with_for_update(skip_locked=True)
            )
            mine = [j.id for j in taken if j.tenant_id == tenant_id]
            if mine:
                stmt = stmt.where(Job.id.not_in(mine))
            full = [lane.value for lane in caps if room(tenant_id, lane) <= 0]
            if full:  # its next jobs of a full lane wait; the others still go
                stmt = stmt.where(LANE.not_in(full))
            rows = list((await session.execute(stmt)).scalars())
            for job in rows:
                lane = lane_of(job)
                if lane in caps:
                    if room(tenant_id, lane) <= 0:
                        continue  # stays pending (its lane is excluded from now on)
                    held[(tenant_id, lane)] = held.get((tenant_id, lane), 0) + 1
                    lane_held[lane] += 1
                taken.append(job)
            if len(rows) == share:
                still_hungry.append(tenant_id)
        hungry = still_hungry
    # Interleave tenants so the queue itself is fair, then cap.
    seen: dict[uuid.UUID, int] = {}
    ranked = []
    for job in sorted(taken, key=lambda j: (j.priority, j.id)):
        seen[job.tenant_id] = seen.get(job.tenant_id, -1) + 1
        ranked.append((seen[job.tenant_id], job.priority, job.id, job))
    ranked.sort(key=lambda r: r[:3])
    return [job for *_, job in ranked[:slots]]


async def mark_dispatched(session: AsyncSession, jobs: Sequence[Job]) -> None:
    by_tenant: dict[uuid.UUID, list[int]] = {}
    for job in jobs:
        by_tenant.setdefault(job.tenant_id, []).append(job.id)
    for tenant_id, ids in by_tenant.items():
        await session.execute(
            update(Job)
            .where(Job.tenant_id == tenant_id, Job.id.in_(ids))
            .values(
                status=JobStatus.DISPATCHED.value, heartbeat_at=func.now(), updated_at=func.now()
            )
            .execution_options(synchronize_session=False)
        )


async def sweep_stale(
    session: AsyncSession, *, lease_seconds: float, dispatch_timeout_seconds: float
) -> int:
    """Put back jobs whose worker stopped heart-beating, or that never reached one."""
    result = await session.execute(
        update(Job)
        .where(
            or_(
                and_(
                    Job.status == JobStatus.RUNNING.value,
                    Job.heartbeat_at < func.now() - _seconds(lease_seconds),
                ),
                and_(
                    Job.status == JobStatus.DISPATCHED.value,
                    Job.heartbeat_at < func.now() - _seconds(dispatch_timeout_seconds),
                ),
            )
        )
        .values(
            status=JobStatus.PENDING.value,
            claim_token=None,
            next_run_at=func.now(),
            updated_at=func.now(),
        )
        .returning(Job.id)
    )
    return len(result.all())


def _seconds(value: float) -> Any:
    return func.make_interval(0, 0, 0, 0, 0, 0, value)


# -- one job's life (tenant context) ---------------------------------------------------


async def claim_many(
    session: AsyncSession, tenant: TenantScope, job_ids: Sequence[int], token: uuid.UUID
) -> list[Job]:
    """Take jobs for this worker run; those not ours to run are left out."""
    rows = await session.scalars(
        update(Job)
        .where(
            Job.tenant_id == tenant.tenant_id,
            Job.id.in_(list(job_ids)),
            or_(
                Job.status == JobStatus.DISPATCHED.value,
                and_(Job.status == JobStatus.PENDING.value, Job.next_run_at <= func.now()),
            ),
        )
        .values(
            status=JobStatus.RUNNING.value,
            claim_token=token,
            attempts=Job.attempts + 1,
            heartbeat_at=func.now(),
            claimed_at=func.now(),
            updated_at=func.now(),
        )
        .returning(Job)
    )
    return sorted(rows.all(), key=lambda j: j.id)


async def heartbeat_many(
    session: AsyncSession, tenant: TenantScope, job_ids: Sequence[int], token: uuid.UUID
) -> int:
    """Keep this run's claims alive; returns how many it still holds."""
    result = await session.execute(
        update(Job)
        .where(
            Job.tenant_id == tenant.tenant_id,
            Job.id.in_(list(job_ids)),
            Job.claim_token == token,
            Job.status == JobStatus.RUNNING.value,
        )
        .values(heartbeat_at=func.now())
        .returning(Job.id)
    )
    return len(result.all())


async def finish(
    session: AsyncSession,
    tenant: TenantScope,
    job_id: int,
    token: uuid.UUID,
    *,
    result: dict[str, Any] | None,
) -> bool:
    return await finish_many(session, tenant, [job_id], token, result=result) == 1


async def finish_many(
    session: AsyncSession,
    tenant: TenantScope,
    job_ids: Sequence[int],
    token: uuid.UUID,
    *,
    result: dict[str, Any] | None,
) -> int:
    """Mark done the jobs this run still holds; returns how many. Content a job
    carried (``payload.content``) is dropped: it is not kept past its work."""
    if not job_ids:
        return 0
    done = await session.execute(
        update(Job)
        .where(
            Job.tenant_id == tenant.tenant_id,
            Job.id.in_(list(job_ids)),
            Job.claim_token == token,
            Job.status == JobStatus.RUNNING.value,
        )
        .values(
            status=JobStatus.DONE.value,
            result=result,
            finished_at=func.now(),
            last_error=None,
            updated_at=func.now(),
            payload=Job.payload.op("-")("content"),
        )
        .returning(Job.id)
    )
    return len(done.all())


async def fail(
    session: AsyncSession,
    tenant: TenantScope,
    job_id: int,
    token: uuid.UUID,
    *,
    error: str,
    retry_in_seconds: float | None,
) -> bool:
    """Schedule a retry, or dead-letter when ``retry_in_seconds`` is None."""
    values: dict[str, Any] = {
        "last_error": error[:4000],
        "claim_token": None,
        "updated_at": func.now(),
    }
    if retry_in_seconds is None:
        values.update(
            status=JobStatus.DEAD.value, dead_lettered_at=func.now(), finished_at=func.now()
        )
    else:
        values.update(
            status=JobStatus.PENDING.value, next_run_at=func.now() + _seconds(retry_in_seconds)
        )
    result = await session.execute(
        update(Job)
        .where(
            Job.tenant_id == tenant.tenant_id,
            Job.id == job_id,
            Job.claim_token == token,
            Job.status == JobStatus.RUNNING.value,
        )
        .values(**values)
        .returning(Job.id)
    )
    return result.first() is not None


def _mine(scope: Scope, public_id: uuid.UUID) -> Any:
    return and_(
        Job.tenant_id == scope.tenant_id,
        Job.project_id == scope.project_id,
        Job.public_id == public_id,
    )


async def get(session: AsyncSession, scope: Scope, public_id: uuid.UUID) -> Job | None:
    return await session.scalar(select(Job).where(_mine(scope, public_id)))


async def public_id_of(session: AsyncSession, scope: Scope, job_id: int) -> uuid.UUID:
    found = await session.scalar(
        select(Job.public_id).where(Job.tenant_id == scope.tenant_id, Job.id == job_id)
    )
    assert found is not None
    return found


async def list_jobs(
    session: AsyncSession,
    scope: Scope,
    *,
    status: str | None,
    kind: str | None,
    note_id: str | None,
    limit: int,
    before: uuid.UUID | None,
    payload_match: tuple[str, str] | None = None,
) -> Sequence[Job]:
    """The project's jobs, newest first; ``payload_match`` (key, value):
    only jobs whose payload has that value at that key."""
    stmt = select(Job).where(Job.tenant_id == scope.tenant_id, Job.project_id == scope.project_id)
    if payload_match is not None:
        stmt = stmt.where(Job.payload[payload_match[0]].astext == payload_match[1])
    if status:
        stmt = stmt.where(Job.status == status)
    if kind:
        stmt = stmt.where(Job.kind == kind)
    if note_id:
        stmt = stmt.where(Job.note_id == note_id)
    if before is not None:
        stmt = stmt.where(Job.id < select(Job.id).where(_mine(scope, before)).scalar_subquery())
    return (await session.execute(stmt.order_by(Job.id.desc()).limit(limit))).scalars().all()


async def requeue(session: AsyncSession, scope: Scope, public_id: uuid.UUID) -> Job | None:
    """A dead job back to pending with fresh attempts."""
    return await session.scalar(
        update(Job)
        .where(_mine(scope, public_id), Job.status == JobStatus.DEAD.value)
        .values(
            status=JobStatus.PENDING.value,
            attempts=0,
            next_run_at=func.now(),
            dead_lettered_at=None,
            finished_at=None,
            updated_at=func.now(),
        )
        .returning(Job)
    )


async def delete_job(session: AsyncSession, scope: Scope, public_id: uuid.UUID) -> bool:
    result = await session.execute(delete(Job).where(_mine(scope, public_id)).returning(Job.id))
    return result.first() is not None


async def notes_with_open_jobs(
    session: AsyncSession,
    scope: Scope,
    note_ids: Sequence[str],
    *,
    kinds: Sequence[str],
    excluding: Sequence[int],
) -> set[str]:
    """Which of these notes still have unfinished jobs of these kinds (others' jobs)."""
    rows = await session.execute(
        select(Job.note_id)
        .where(
            Job.tenant_id == scope.tenant_id,
            Job.project_id == scope.project_id,
            Job.note_id.in_(list(note_ids)),
            Job.kind.in_(list(kinds)),
            Job.status.in_(_OPEN),
            Job.id.not_in(list(excluding)),
        )
        .distinct()
    )
    return {r[0] for r in rows if r[0] is not None}


def count_open_sql(kinds: Sequence[str]) -> Callable[[Params, Scope], str]:
    """How many notes have open jobs of ``kinds``, as a scalar subquery
    (find reads it in its opening statement, with other values)."""

    def fragment(p: Params, scope: Scope) -> str:
        return (
            "(SELECT count(DISTINCT note_id) FROM jobs "
            f"WHERE tenant_id = {p.once('tenant', scope.tenant_id)} "
            f"AND project_id = {p.once('project', scope.project_id)} "
            f"AND kind = ANY({p(list(kinds))}::text[]) AND status = ANY({p(list(_OPEN))}::text[]))"
        )

    return fragment


async def count_open(session: AsyncSession, scope: Scope, *, kinds: Sequence[str]) -> int:
    p = Params()
    sql = f"SELECT {count_open_sql(kinds)(p, scope)}"
    return int(await (await driver(session)).fetchval(sql, *p.values) or 0)


async def queue_stats(session: AsyncSession) -> list[tuple[str, str, int, float | None]]:
    """(kind, status, count, seconds since the oldest was queued) of every
    tenant's open and dead jobs (a system transaction: metrics)."""
    rows = await session.execute(
        select(
            Job.kind,
            Job.status,
            func.count(),
            func.extract("epoch", func.now() - func.min(Job.created_at)),
        )
        .where(Job.status.in_(OPEN_AND_DEAD))
        .group_by(Job.kind, Job.status)
    )
    return [(k, s, int(n), float(age) if age is not None else None) for k, s, n, age in rows.all()]
