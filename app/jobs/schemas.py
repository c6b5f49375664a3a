"""Wire schemas for jobs and keep's task delegation."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, Field

from app.models import Job

JobId = Annotated[
    str, Path(description="A job or task id (a UUID, as the API shows it).", max_length=45)
]


class JobOut(BaseModel):
    id: str = Field(description="Random per job (a UUID); not a sequence number.")
    kind: str
    note_id: str | None
    status: str = Field(description="pending, dispatched, running, done, dead or superseded")
    attempts: int
    max_attempts: int
    next_run_at: datetime
    last_error: str | None
    result: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    dead_lettered_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls(
            id=str(job.public_id),
            kind=job.kind,
            note_id=job.note_id,
            status=job.status,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            next_run_at=job.next_run_at,
            last_error=job.last_error,
            result=job.result,
            created_at=job.created_at,
            updated_at=job.updated_at,
            dead_lettered_at=job.dead_lettered_at,
        )


class JobList(BaseModel):
    jobs: list[JobOut]
    next_before: str | None = Field(default=None, description="Pass as `before` for more.")


class Processor(BaseModel):
    task_type: str


class ProcessorList(BaseModel):
    processors: list[Processor]


class TaskAction(BaseModel):
    name: str | None = None
    params: dict[str, Any] | None = None


class TaskCreate(BaseModel):
    task_type: str = Field(description="summarize or analyze")
    content: str
    metadata: dict[str, Any] | None = None
    action: TaskAction | None = None


class TaskCreated(BaseModel):
    task_id: str


class TaskOut(BaseModel):
    status: str = Field(description="queued, processing, completed or failed")
    task_type: str
    output: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
