"""Job mechanics: claim, heartbeat, run the kind's handler, finish or fail
with backoff and dead letters.

Every job takes ids only and is safe to run twice. A worker message names a
tenant and job ids; this module claims them (tenancy from the job rows
themselves), runs each kind's handler (``app.pipeline.handlers``; embedding
jobs of a project share one model call), and records every failure on the
job row: retried with exponential backoff, dead-lettered when permanent or
out of attempts. The data a job changes is changed by the owning domain's
services, never here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from app import metrics, tenancy, tracing
from app.db import is_outage
from app.ingest import documents
from app.jobs import outbox
from app.jobs.kinds import JobKind
from app.logs import log_failure
from app.notes import derived
from app.pipeline import handlers
from app.pipeline.jobrun import JobRun, LostClaim
from app.pipeline.pipeline import Pipeline
from app.providers.errors import PermanentError, ProviderError
from app.request_vars import tenant_var
from app.settings import Settings
from app.tenancy import TenantScope, scope_for_job, tenant_for_jobs

__all__ = ["Pipeline", "backoff", "run", "run_batch"]

log = logging.getLogger("keepmem.pipeline")

VECTOR_KINDS = (JobKind.EMBED.value, JobKind.REINDEX.value)
#: Kinds whose note shows a placeholder until they deliver; one that fails
#: for good says so in the placeholder's summary.
DOCUMENT_KINDS = (JobKind.FETCH.value, JobKind.OCR.value, JobKind.TRANSCRIBE.value)


def backoff(settings: Settings, attempts: int) -> float:
    """30 s, 60 s, 120 s ... capped at an hour (keep's schedule)."""
    return float(
        min(
            settings.job_backoff_base_seconds * 2 ** max(attempts - 1, 0),
            settings.job_backoff_max_seconds,
        )
    )


async def run(pipeline: Pipeline, tenant_id: uuid.UUID, job_id: int) -> str:
    """Run one outbox job to an outcome: done, retry, dead, skipped or not claimed."""
    return (await run_batch(pipeline, tenant_id, [job_id])).get(job_id, "not-claimed")


async def run_batch(
    pipeline: Pipeline, tenant_id: uuid.UUID, job_ids: Sequence[int]
) -> dict[int, str]:
    """Run several jobs of one tenant. Embedding jobs of a project share one
    model call and one write; other kinds run one after another.

    A database that cannot be reached is one line in the log, not a stack per
    job: the jobs stay in the outbox and are dispatched again once their
    claim's lease runs out (nothing is lost)."""
    try:
        return await _run_batch(pipeline, tenant_id, job_ids)
    except Exception as exc:
        if not is_outage(exc):
            raise
        log_failure(log, "jobs not run (database unavailable)", exc)
        return {}


async def _run_batch(
    pipeline: Pipeline, tenant_id: uuid.UUID, job_ids: Sequence[int]
) -> dict[int, str]:
    tenant = tenant_for_jobs(tenant_id)
    tenant_var.set(str(tenant_id))  # this job's task only (log lines)
    token = uuid.uuid4()
    async with tenancy.transaction(pipeline.db, tenant) as session:
        claimed = await outbox.claim_many(session, tenant, job_ids=job_ids, token=token)
    if not claimed:
        return {}
    beat = asyncio.create_task(_heartbeat(pipeline, tenant, [j.id for j in claimed], token))
    outcomes: dict[int, str] = {}
    try:
        by_project: dict[uuid.UUID, list[JobRun]] = {}
        for job in claimed:
            job_run = JobRun(pipeline, scope_for_job(tenant_id, job.project_id), job, token)
            if job.kind in VECTOR_KINDS:
                by_project.setdefault(job.project_id, []).append(job_run)
            else:
                outcomes |= await _guard([job_run], handlers.HANDLERS[JobKind(job.kind)])
        for runs in by_project.values():
            outcomes |= await _guard(runs, _embed)
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
    return outcomes


async def _embed(runs: list[JobRun]) -> None:
    await handlers.embed_batch(runs, _record_failure)


async def _guard(
    runs: list[JobRun], handler: Callable[[list[JobRun]], Awaitable[None]]
) -> dict[int, str]:
    began = time.perf_counter()
    with tracing.span(f"job {runs[0].job.kind}", {"keepmem.jobs": len(runs)}):
        try:
            await handler(runs)
            outcomes = {r.job.id: "done" for r in runs}
        except LostClaim:
            outcomes = {r.job.id: "lost-claim" for r in runs}
        except Exception as exc:  # noqa: BLE001 - every failure is recorded on the job row
            outcomes = {r.job.id: await _record_failure(r, exc) for r in runs}
    seconds = time.perf_counter() - began
    for run in runs:
        metrics.observe_job(run.job.kind, outcomes[run.job.id], seconds)
    if runs[0].job.kind in VECTOR_KINDS:
        metrics.EMBEDDED.inc(sum(1 for o in outcomes.values() if o == "done"))
    return outcomes


async def _record_failure(job_run: JobRun, exc: Exception) -> str:
    settings, job, scope = job_run.pipeline.settings, job_run.job, job_run.scope
    permanent = isinstance(exc, PermanentError) or (
        isinstance(exc, ProviderError) and exc.permanent
    )
    # Deliveries carry their own limit (settings.webhook_max_attempts).
    limit = job.max_attempts if job.kind == JobKind.WEBHOOK.value else settings.job_max_attempts
    out_of_attempts = job.attempts >= limit
    retry = None if (permanent or out_of_attempts) else backoff(settings, job.attempts)
    async with job_run.transaction() as session:
        await outbox.fail(
            session,
            scope,
            job_id=job.id,
            token=job_run.token,
            error=f"{type(exc).__name__}: {exc}",
            retry_in_seconds=retry,
        )
        if retry is None and job.kind in (JobKind.OCR.value, JobKind.TRANSCRIBE.value):
            await documents.release_images(session, scope, job_id=job.id)
        if retry is None and job.kind in DOCUMENT_KINDS:
            # The placeholder says what happened instead of promising text.
            await derived.give_up(session, scope, note_id=job_run.note_id, reason=str(exc))
    # Logged once recorded: when the database is down, recording fails too
    # and run_batch writes one line for the outage instead of a stack per job
    # (the claim's lease runs out and the job is dispatched again).
    if not isinstance(exc, ProviderError):
        log.error("job %s (%s) failed", job.id, job.kind, exc_info=exc)
    return "dead" if retry is None else "retry"


async def _heartbeat(
    pipeline: Pipeline, tenant: TenantScope, job_ids: list[int], token: uuid.UUID
) -> None:
    interval = max(pipeline.settings.job_lease_seconds / 3, 0.2)
    while True:
        await asyncio.sleep(interval)
        async with tenancy.transaction(pipeline.db, tenant) as session:
            if not await outbox.heartbeat_many(session, tenant, job_ids=job_ids, token=token):
                return
