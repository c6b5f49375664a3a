"""One claimed job while it runs, and the one shape of a job's work:
load the note, compute outside any transaction, apply if still current.

Slow work (models, HTTP providers) runs outside any database transaction; its
result is applied in a transaction that also marks the job done, only while
this run still holds the claim (a job taken over elsewhere changes nothing)
and only if the note still has the content the job was queued for (a newer
put changes the content hash, and the older job applies nothing).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.jobs import outbox
from app.models import Job, Note
from app.notes import derived
from app.notes import repository as notes
from app.pipeline.pipeline import Pipeline
from app.tenancy import Scope

T = TypeVar("T")
R = TypeVar("R")


class LostClaim(Exception):
    """The job was taken over (stale claim recovered elsewhere): apply nothing."""


def stale(job: Job, note: Note | None) -> str | None:
    """Why this job should apply nothing: the note is gone, or the content it
    was queued for has been replaced by a newer put."""
    if note is None:
        return "note deleted"
    expected = job.payload.get("content_hash")
    if expected and note.content_hash != expected:
        return "superseded"
    return None


@dataclass
class JobRun:
    """A job this worker run holds (by ``token``), with the scope it works in."""

    pipeline: Pipeline
    scope: Scope
    job: Job
    token: uuid.UUID

    @property
    def note_id(self) -> str:
        return self.job.note_id or ""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        async with tenancy.transaction(self.pipeline.db, self.scope) as session:
            yield session

    async def finish(self, session: AsyncSession, result: dict[str, Any]) -> None:
        if not await outbox.finish(
            session, self.scope, job_id=self.job.id, token=self.token, result=result
        ):
            raise LostClaim


async def on_current_note(
    run: JobRun,
    *,
    load: Callable[[AsyncSession, Note], Awaitable[T]],
    compute: Callable[[T], Awaitable[R]],
    apply: Callable[[AsyncSession, Note, R], Awaitable[dict[str, Any]]],
    same_content: bool = True,
) -> None:
    """Load from the note, compute outside the transaction, apply if current.

    ``load`` reads what the work needs (in a transaction); ``compute`` runs
    the model; ``apply`` writes the result under the note's row lock and
    returns the job's result. A note deleted or superseded meanwhile ends the
    job as skipped. ``same_content=False`` applies even after a newer put
    (work on content the job carried itself).
    """
    async with run.transaction() as session:
        note = await notes.get(session, run.scope, run.note_id)
        if (reason := stale(run.job, note)) is not None or note is None:
            await run.finish(session, {"skipped": reason})
            return
        seen_hash = note.content_hash
        loaded = await load(session, note)
    result = await compute(loaded)
    async with run.transaction() as session:
        note = await notes.get(session, run.scope, run.note_id, lock=True)
        if note is None or (same_content and note.content_hash != seen_hash):
            await run.finish(session, {"skipped": "superseded"})
            return
        await run.finish(session, await apply(session, note, result))


async def release_held(session: AsyncSession, runs: Sequence[JobRun], held: Sequence[Note]) -> None:
    """Let the notes' held content go if no other queued work needs it."""
    if runs:
        await derived.release_content(
            session,
            runs[0].scope,
            held=held,
            finishing_jobs=[r.job.id for r in runs],
            keep_for_context=runs[0].pipeline.summarizer.uses_context,
        )
