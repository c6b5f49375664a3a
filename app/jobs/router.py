"""Job routes, and keep's task-delegation API (KEEP_PROTOCOL §3.7)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from app.deps import LimitsDep, ReadScope, SessionDep, WriteScope
from app.jobs import service
from app.jobs.schemas import (
    JobId,
    JobList,
    JobOut,
    Processor,
    ProcessorList,
    TaskCreate,
    TaskCreated,
    TaskOut,
)
from app.kit.ids import MAX_ID_LENGTH
from app.wire import api_router

router = api_router(prefix="/v1", tags=["jobs"])


@router.get("/jobs", response_model=JobList, summary="List background jobs")
async def list_jobs(
    scope: ReadScope,
    session: SessionDep,
    status: Annotated[str | None, Query(description="pending, running, done, dead ...")] = None,
    kind: Annotated[str | None, Query(description="embed, summarize, analyze ...")] = None,
    note_id: Annotated[
        str | None,
        Query(description="Only this note's jobs.", min_length=1, max_length=MAX_ID_LENGTH),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        str | None,
        Query(
            description="Jobs older than this one (a job id: `next_before` of a page).",
            max_length=45,
        ),
    ] = None,
) -> JobList:
    """The project's jobs, newest first, with attempts and the last error."""
    rows = await service.list_jobs(
        session, scope, status=status, kind=kind, note_id=note_id, limit=limit, before=before
    )
    last = str(rows[-1].public_id) if len(rows) == limit else None
    return JobList(jobs=[JobOut.of(j) for j in rows], next_before=last)


@router.get("/jobs/{job_id}", response_model=JobOut, summary="Get a job")
async def get_job(job_id: JobId, scope: ReadScope, session: SessionDep) -> JobOut:
    """One job of the project."""
    return JobOut.of(await service.get_job(session, scope, job_id=job_id))


@router.post("/jobs/{job_id}/retry", response_model=JobOut, summary="Retry a dead job")
async def retry_job(job_id: JobId, scope: WriteScope, session: SessionDep) -> JobOut:
    """Send a dead-lettered job back to the queue with its attempts reset."""
    return JobOut.of(await service.retry_job(session, scope, job_id=job_id))


@router.get("/processors", response_model=ProcessorList, summary="Delegable task types")
async def processors(scope: ReadScope) -> ProcessorList:
    """Task types a local keep may hand to this service."""
    return ProcessorList(processors=[Processor(task_type=t) for t in service.TASK_TYPES])


@router.post("/tasks", response_model=TaskCreated, summary="Delegate a task")
async def create_task(
    body: TaskCreate, scope: WriteScope, session: SessionDep, limits: LimitsDep
) -> TaskCreated:
    """Queue work on content sent by a local keep (summarize, analyze)."""
    task_id = await service.create_task(
        session,
        scope,
        task_type=body.task_type,
        content=body.content,
        metadata=body.metadata,
        max_chars=limits.max_content_chars,
    )
    return TaskCreated(task_id=str(task_id))


@router.get("/tasks/{task_id}", response_model=TaskOut, summary="Poll a task")
async def get_task(task_id: JobId, scope: ReadScope, session: SessionDep) -> TaskOut:
    """Status and, once completed, the output (`summary`, or `parts`)."""
    job = await service.get_task(session, scope, task_id=task_id)
    status = service.task_status(job)
    return TaskOut(
        status=status,
        task_type=str(job.payload.get("task_type", "")),
        output=job.result if status == "completed" else None,
        result=job.result if status == "completed" else None,
        error=job.last_error if status == "failed" else None,
    )


@router.delete("/tasks/{task_id}", status_code=204, summary="Acknowledge a task")
async def delete_task(task_id: JobId, scope: WriteScope, session: SessionDep) -> None:
    """Forget a task once its output has been taken."""
    await service.delete_task(session, scope, task_id=task_id)
