"""Outbox -> ARQ. Runs inside every worker; ``SKIP LOCKED`` keeps them apart.

Each round: put back stale claims (a worker died), then move ready jobs to
Redis, fairly across tenants and never more than ``dispatch_max_inflight`` at
once, so jobs wait in Postgres (where fairness is decided), not in Redis.
Slow lanes (background work, webhook deliveries) have caps of their own, in
all and per tenant, below a worker's slots: they cannot fill a worker. The
ARQ enqueue happens inside the transaction that marks rows dispatched: if
Redis is down the transaction rolls back and the rows simply wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from app import tenancy
from app.audit import service as audit
from app.events import webhooks
from app.jobs import outbox
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind, Lane
from app.kit.timeutil import utcnow
from app.logs import log_failure
from app.models import Job
from app.notes.repository import vectors
from app.pipeline import planner_stats
from app.pipeline.runner import VECTOR_KINDS, Pipeline
from app.retention import repository as retention
from app.search.fulltext import repository as search
from app.sessions import service as sessions
from app.settings import Settings
from app.tenancy import scope_for_job, tenant_for_jobs
from app.tenants import repository as projects
from app.usage import service as usage_service

log = logging.getLogger("keepmem.dispatcher")

TASK = "run_jobs"
USAGE_DAYS_KEPT = 40  # daily usage counts (quotas need only today)


async def sweep(pipeline: Pipeline) -> int:
    settings = pipeline.settings
    async with tenancy.system_transaction(pipeline.db) as session:
        return await outbox.sweep_stale(
            session,
            lease_seconds=settings.job_lease_seconds,
            dispatch_timeout_seconds=settings.job_dispatch_timeout_seconds,
        )


def batches(ready: Sequence[Job], size: int) -> list[tuple[uuid.UUID, list[int]]]:
    """Group a tenant's embedding jobs into batches (one model call each);
    every other job travels alone. Tenants stay interleaved."""
    out: list[tuple[uuid.UUID, list[int]]] = []
    open_batch: dict[uuid.UUID, list[int]] = {}
    for job in ready:
        if job.kind not in VECTOR_KINDS:
            out.append((job.tenant_id, [job.id]))
            continue
        batch = open_batch.get(job.tenant_id)
        if batch is None or len(batch) >= size:
            batch = []
            open_batch[job.tenant_id] = batch
            out.append((job.tenant_id, batch))
        batch.append(job.id)
    return out


def lane_caps(settings: Settings) -> dict[Lane, jobs.LaneCap]:
    """The slow lanes' caps: jobs in flight on all workers, in all and per tenant."""
    return {
        Lane.BACKGROUND: jobs.LaneCap(
            settings.dispatch_background_inflight, settings.dispatch_background_per_tenant
        ),
        Lane.REMOTE: jobs.LaneCap(
            settings.dispatch_remote_inflight, settings.dispatch_remote_per_tenant
        ),
    }


async def dispatch(pipeline: Pipeline, redis: Any) -> int:
    settings = pipeline.settings
    async with tenancy.system_transaction(pipeline.db) as session:
        busy = await jobs.inflight_by_lane(session)
        ready = await jobs.take_ready_fairly(
            session,
            slots=settings.dispatch_max_inflight - sum(busy.values()),
            caps=lane_caps(settings),
            busy=busy,
        )
        for tenant_id, ids in batches(ready, settings.embed_batch_jobs):
            await redis.enqueue_job(
                TASK,
                str(tenant_id),
                ids,
                _job_id=f"{tenant_id}:{ids[0]}:{uuid.uuid4().hex[:12]}",
                _queue_name=settings.queue_name,
            )
        await outbox.mark_dispatched(session, ready)
    return len(ready)


async def reconcile(pipeline: Pipeline, *, limit: int = 1000) -> int:
    """Queue a reindex for notes with no vector of the current model (a model
    change, or vectors lost): search only uses the current model's vectors, so
    a change of model never mixes spaces. And a recount of the common words of
    big projects whose count is missing or old (find's full-text stage)."""
    model = pipeline.embedder.model_id
    async with tenancy.system_transaction(pipeline.db) as session:
        missing = await vectors.notes_missing_model(session, model=model, limit=limit)
        for tenant_id, project_id, note_id in missing:
            await jobs.enqueue(
                session,
                scope_for_job(tenant_id, project_id),
                kind=JobKind.REINDEX,
                note_id=note_id,
                priority=8,
            )
        # Projects' word counts, for find's full-text stage.
        for tenant_id, project_id in await search.projects_needing_term_stats(
            session,
            min_notes=pipeline.settings.term_stats_min_notes,
            max_age_seconds=pipeline.settings.term_stats_max_age_seconds,
            limit=limit,
        ):
            await jobs.enqueue(
                session,
                scope_for_job(tenant_id, project_id),
                kind=JobKind.TERM_STATS,
                note_id=None,
                priority=9,
            )
        # Coding-agent sessions gone quiet since their last checkpoint.
        for tenant_id, project_id, session_id in await sessions.idle_sessions(
            session, idle_minutes=pipeline.settings.session_idle_minutes, limit=limit
        ):
            await sessions.checkpoint_idle(
                session, scope_for_job(tenant_id, project_id), session_id=session_id
            )
        # Notes past their expiry or their project's retention.
        for tenant_id, project_id in await retention.projects_with_due_notes(session, limit=limit):
            await jobs.enqueue(
                session,
                scope_for_job(tenant_id, project_id),
                kind=JobKind.EXPIRE,
                note_id=None,
                priority=7,
            )
    # Audit entries past the retention; daily usage counts past a month.
    await audit.prune_expired(pipeline.db, retention_days=pipeline.settings.audit_retention_days)
    async with tenancy.system_transaction(pipeline.db) as session:
        await usage_service.drop_days_before(
            session, day=utcnow().date() - timedelta(days=USAGE_DAYS_KEPT)
        )
    return len(missing)


WEBHOOK_BATCHES_PER_ROUND = 10  # a busy project's webhook catches up 1,000 changes a round


async def hand_off_webhooks(pipeline: Pipeline) -> int:
    """Queue deliveries of new changes to every due webhook, one transaction
    per batch: one tenant's failure (a quota, say) holds back only its own.
    Returns the changes handed off."""
    async with tenancy.system_transaction(pipeline.db) as session:
        due = await webhooks.due(session)
    handed = 0
    for tenant_id, project_id, webhook_id in due:
        try:
            async with tenancy.system_transaction(pipeline.db) as session:
                tenant = tenant_for_jobs(tenant_id)
                slug = await projects.project_slug(session, tenant, project_id)
            scope = scope_for_job(tenant_id, project_id, slug or "")
            for _ in range(WEBHOOK_BATCHES_PER_ROUND):
                async with tenancy.system_transaction(pipeline.db) as session:
                    looked_at = await webhooks.hand_off(
                        session,
                        scope,
                        webhook_id=webhook_id,
                        attempts=pipeline.settings.webhook_max_attempts,
                    )
                handed += looked_at
                if looked_at < webhooks.EVENTS_PER_DELIVERY:
                    break
        except Exception as exc:  # noqa: BLE001 - the others go on; this one is retried
            log_failure(log, "webhook hand-off failed (will retry)", exc)
    return handed


async def loop(pipeline: Pipeline, redis: Any, *, stop: asyncio.Event | None = None) -> None:
    """Sweep and dispatch until cancelled; errors are logged and retried."""
    settings = pipeline.settings
    next_reconcile = time.monotonic() + 5.0
    next_sweep = next_webhooks = 0.0
    stats = planner_stats.Refresher(pipeline)
    try:
        while stop is None or not stop.is_set():
            moved = 0
            stats.poke()  # planner statistics, in a task of its own
            try:
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + 1.0
                    await sweep(pipeline)
                if time.monotonic() >= next_webhooks:
                    next_webhooks = time.monotonic() + settings.webhook_poll_seconds
                    await hand_off_webhooks(pipeline)
                moved = await dispatch(pipeline, redis)
                if time.monotonic() >= next_reconcile:
                    next_reconcile = time.monotonic() + settings.reconcile_interval_seconds
                    queued = await reconcile(pipeline)
                    if queued:
                        log.info(
                            "queued %d reindex jobs for model %s",
                            queued,
                            pipeline.embedder.model_id,
                        )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis or DB down: rows wait, we retry
                log_failure(log, "dispatch round failed (will retry)", exc)
            if moved == 0:
                await asyncio.sleep(settings.dispatch_poll_seconds)
    finally:
        await stats.aclose()
