"""The mutation change feed, written in the same transaction as the mutation.

``id`` (a sequence every tenant shares) orders the feed and never leaves the
service; ``public_id`` (random) is what events, cursors and webhooks show.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.changes import KEEP_MUTATIONS, EventKind
from app.models import Change
from app.request_vars import journal_var
from app.tenancy import Scope

Listener = Callable[[Scope, Sequence[str]], None]
_listeners: list[Listener] = []


def on_record(listener: Listener) -> None:
    """Call ``listener(scope, note ids)`` for every change this process
    records: a module that keeps note contents in memory (the tag rules)
    forgets what a write made stale, without this module knowing it."""
    _listeners.append(listener)


async def record(
    session: AsyncSession,
    scope: Scope,
    *,
    mutation: str,
    entity_id: str,
    kind: EventKind | None,
    payload: dict[str, Any] | None = None,
) -> None:
    """One change; ``kind`` is what it means to a watcher (None: a
    bookkeeping row only keep's export shows)."""
    _journal([entity_id])
    _tell(scope, [entity_id])
    await session.execute(
        insert(Change).values(
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            mutation=mutation,
            entity_id=entity_id,
            kind=kind.value if kind is not None else None,
            payload=payload or {},
        )
    )


async def record_many(
    session: AsyncSession,
    scope: Scope,
    *,
    mutation: str,
    entity_ids: Sequence[str],
    kind: EventKind | None,
) -> None:
    """One change of the same kind for each entity, in one statement."""
    if not entity_ids:
        return
    _journal(entity_ids)
    _tell(scope, entity_ids)
    await session.execute(
        insert(Change),
        [
            {
                "tenant_id": scope.tenant_id,
                "project_id": scope.project_id,
                "mutation": mutation,
                "entity_id": entity_id,
                "kind": kind.value if kind is not None else None,
                "payload": {},
            }
            for entity_id in entity_ids
        ],
    )


def _of(scope: Scope, *, watched: bool) -> list[Any]:
    """The project's rows: keep's mutations, or (``watched``) the rows a
    watcher sees (those with a kind)."""
    where = [Change.tenant_id == scope.tenant_id, Change.project_id == scope.project_id]
    if watched:
        where.append(Change.kind.is_not(None))
    else:
        where.append(Change.mutation.in_(KEEP_MUTATIONS))
    return where


async def after(
    session: AsyncSession,
    scope: Scope,
    *,
    cursor: int,
    limit: int,
    watched: bool = False,
    kinds: Sequence[str] = (),
) -> list[Change]:
    """The project's changes after ``cursor`` (a change id), oldest first:
    keep's, or (``watched``) those a watcher sees, of ``kinds`` if given."""
    where = [*_of(scope, watched=watched), Change.id > cursor]
    if kinds:
        where.append(Change.kind.in_(list(kinds)))
    rows = await session.execute(select(Change).where(*where).order_by(Change.id).limit(limit))
    return list(rows.scalars())


async def head(session: AsyncSession, scope: Scope, *, watched: bool = False) -> int:
    """The newest change id of the project (0 when none)."""
    newest = await session.scalar(select(func.max(Change.id)).where(*_of(scope, watched=watched)))
    return int(newest or 0)


async def newest(session: AsyncSession, scope: Scope, *, watched: bool = False) -> uuid.UUID | None:
    """The public id of the project's newest change (None when none)."""
    return await session.scalar(
        select(Change.public_id)
        .where(*_of(scope, watched=watched))
        .order_by(Change.id.desc())
        .limit(1)
    )


async def position(session: AsyncSession, scope: Scope, public_id: uuid.UUID) -> int | None:
    """The id of the project's change with this public id (None: not the
    project's, or not visible to the scope)."""
    return await session.scalar(
        select(Change.id).where(
            Change.tenant_id == scope.tenant_id,
            Change.project_id == scope.project_id,
            Change.public_id == public_id,
        )
    )


async def public_ids(
    session: AsyncSession, scope: Scope, ids: Iterable[int]
) -> dict[int, uuid.UUID]:
    """The public ids of the project's changes ``ids`` (those it still has)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = await session.execute(
        select(Change.id, Change.public_id).where(
            Change.tenant_id == scope.tenant_id,
            Change.project_id == scope.project_id,
            Change.id.in_(wanted),
        )
    )
    return {int(i): p for i, p in rows.all()}


def _tell(scope: Scope, entity_ids: Sequence[str]) -> None:
    for listener in _listeners:
        listener(scope, entity_ids)


def _journal(entity_ids: Sequence[str]) -> None:
    """Note the request's changed notes for its audit entry (ids only)."""
    journal = journal_var.get()
    if journal is not None and len(journal.notes) < 1000:
        journal.notes.extend(entity_ids[: 1000 - len(journal.notes)])
