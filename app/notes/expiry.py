"""A put's expiry: ``expires_at`` (an instant) or ``ttl_seconds`` (0: never
expires), written by the put itself, in its own transaction, with a change
feed entry. The project's retention and the sweeper that deletes due notes
are ``app.retention``'s."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound
from app.kit.timeutil import parse_instant, utcnow
from app.notes import repository as repo
from app.notes.repository import changes as feed
from app.tenancy import Scope

MAX_TTL_SECONDS = 10 * 366 * 86400


@dataclass(frozen=True, slots=True)
class Expiry:
    """An expiry a put asked for; ``at`` None: the note never expires."""

    at: datetime | None


def asked(expires_at: str | None, ttl_seconds: int | None) -> Expiry | None:
    """The expiry a put asks for (None: it asks none, and leaves the note's
    as it was); a bad one raises the 400 the client gets."""
    if expires_at is None and ttl_seconds is None:
        return None
    if expires_at is not None and ttl_seconds is not None:
        raise BadRequest("give expires_at or ttl_seconds, not both")
    if ttl_seconds is not None:
        if not 0 <= ttl_seconds <= MAX_TTL_SECONDS:
            raise BadRequest(f"ttl_seconds must be 0-{MAX_TTL_SECONDS}")
        return Expiry(None if ttl_seconds == 0 else utcnow() + timedelta(seconds=ttl_seconds))
    assert expires_at is not None
    try:
        return Expiry(parse_instant(expires_at))
    except ValueError as exc:
        raise BadRequest(
            f"invalid expires_at {expires_at[:40]!r}: ISO-8601 with a time zone "
            "(e.g. 2027-01-01T00:00:00Z)"
        ) from exc


async def apply(session: AsyncSession, scope: Scope, *, note_id: str, expiry: Expiry) -> None:
    """Write the note's expiry and record it in the change feed (keep's
    export sees a ``doc_update``; the payload says when)."""
    if not await repo.set_expiry(session, scope, note_id, expires_at=expiry.at):
        raise NoteNotFound(f"note not found: {note_id}")
    when = expiry.at.isoformat() if expiry.at is not None else None
    await feed.record(
        session,
        scope,
        mutation="doc_update",
        entity_id=note_id,
        kind=None,
        payload={"expires_at": when},
    )
