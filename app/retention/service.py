"""Retention: projects that keep notes only so long, and notes that expire
(a put writes its own ``expires_at``: ``app.notes.expiry``). The sweeper
(the worker's dispatcher) queues an ``expire`` job per project with due
notes, and the job deletes them the way DELETE /v1/notes/{id} does
(versions, parts, vectors, edges; a change feed entry each)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound
from app.notes import service as notes
from app.retention import repository as repo
from app.tenancy import Scope

BATCH = 500


async def set_retention(session: AsyncSession, scope: Scope, *, days: int | None) -> None:
    if days is not None and not 1 <= days <= 36600:
        raise BadRequest("retention days must be 1-36600, or null to keep notes forever")
    await repo.set_retention(session, scope, days)


async def retention(session: AsyncSession, scope: Scope) -> int | None:
    return await repo.retention(session, scope)


async def expire_due(session: AsyncSession, scope: Scope) -> tuple[int, bool]:
    """Delete up to a batch of the project's due notes; (deleted, more left)."""
    due = await repo.due_notes(session, scope, limit=BATCH + 1)
    deleted = 0
    for note_id in due[:BATCH]:
        try:
            await notes.delete(session, scope, raw_id=note_id, delete_versions=True)
        except NoteNotFound:
            continue  # deleted meanwhile
        deleted += 1
    return deleted, len(due) > BATCH
