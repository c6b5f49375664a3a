"""Retention: notes that expire (``expires_at`` or a TTL on put) and
projects that keep notes only so long; the sweeper (the worker's dispatcher)
queues an ``expire`` job per project with due notes, and the job deletes them
the way DELETE /v1/notes/{id} does (versions, parts, vectors, edges; a change
feed entry each)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound
from app.kit.timeutil import parse_instant, utcnow
from app.notes import service as notes
from app.retention import repository as repo
from app.tenancy import Scope

MAX_TTL_SECONDS = 10 * 366 * 86400
BATCH = 500


def expiry_of(expires_at: str | None, ttl_seconds: int | None) -> datetime | None:
    """When a put asks its note to expire (``ttl_seconds`` 0: never)."""
    if expires_at is not None and ttl_seconds is not None:
        raise BadRequest("give expires_at or ttl_seconds, not both")
    if ttl_seconds is not None:
        if not 0 <= ttl_seconds <= MAX_TTL_SECONDS:
            raise BadRequest(f"ttl_seconds must be 0-{MAX_TTL_SECONDS}")
        return None if ttl_seconds == 0 else utcnow() + timedelta(seconds=ttl_seconds)
    if expires_at is None:
        return None
    try:
        return parse_instant(expires_at)
    except ValueError as exc:
        raise BadRequest(
            f"invalid expires_at {expires_at[:40]!r}: ISO-8601 with a time zone "
            "(e.g. 2027-01-01T00:00:00Z)"
        ) from exc


async def set_expiry(
    session: AsyncSession, scope: Scope, note_id: str, expires_at: datetime | None
) -> None:
    if not await repo.set_expiry(session, scope, note_id, expires_at):
        raise NoteNotFound(f"note not found: {note_id}")


async def set_retention(session: AsyncSession, scope: Scope, days: int | None) -> None:
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
