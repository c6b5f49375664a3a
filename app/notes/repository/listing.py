"""The notes table, many rows at a time: lists, counts, notes sharing tags
and neighbours on the timeline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    func,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Note
from app.notes.repository._shared import in_scope
from app.tenancy import Scope


async def count(session: AsyncSession, scope: Scope, *, include_hidden: bool = False) -> int:
    stmt = select(func.count()).select_from(Note).where(in_scope(scope))
    if not include_hidden:
        stmt = stmt.where(~Note.id.startswith(".", autoescape=True))
    return int(await session.scalar(stmt) or 0)


@dataclass(frozen=True, slots=True)
class ListQuery:
    prefix: str | None = None
    glob_regex: str | None = None
    tag_terms: Sequence[str] = ()
    since: datetime | None = None
    until: datetime | None = None
    order_by: str = "updated"
    limit: int = 20
    offset: int = 0
    include_hidden: bool = False
    after: tuple[datetime | str, str] | None = None  # keyset cursor (sort value, id)


_ORDER_COLUMNS = {
    "updated": Note.updated_at,
    "accessed": Note.accessed_at,
    "created": Note.created_at,
}


def _list_statement(scope: Scope, q: ListQuery) -> Select[Note]:
    stmt = select(Note).where(in_scope(scope))
    if q.prefix:
        stmt = stmt.where(Note.id.startswith(q.prefix, autoescape=True))
    if q.glob_regex:
        stmt = stmt.where(Note.id.regexp_match(q.glob_regex))
    if not q.include_hidden:
        stmt = stmt.where(~Note.id.startswith(".", autoescape=True))
    if q.tag_terms:
        stmt = stmt.where(Note.tag_index.contains(list(q.tag_terms)))
    if q.since is not None:
        stmt = stmt.where(Note.updated_at >= q.since)
    if q.until is not None:
        stmt = stmt.where(Note.updated_at < q.until)
    if q.order_by == "id":
        if q.after is not None:
            stmt = stmt.where(Note.id > q.after[1])
        return stmt.order_by(Note.id)
    column = _ORDER_COLUMNS[q.order_by]
    if q.after is not None:
        value, after_id = q.after
        stmt = stmt.where(or_(column < value, and_(column == value, Note.id > after_id)))
    return stmt.order_by(column.desc(), Note.id)


async def list_notes(session: AsyncSession, scope: Scope, q: ListQuery) -> Sequence[Note]:
    stmt = _list_statement(scope, q).limit(q.limit)
    if q.offset and q.after is None:
        stmt = stmt.offset(q.offset)
    return (await session.execute(stmt)).scalars().all()


async def sharing_tags(
    session: AsyncSession, scope: Scope, *, terms: Sequence[str], exclude: str, limit: int
) -> Sequence[Note]:
    """Visible notes holding at least one of these ``key=value`` tag terms."""
    stmt = (
        select(Note)
        .where(
            in_scope(scope),
            Note.id != exclude,
            ~Note.id.startswith(".", autoescape=True),
            Note.tag_index.overlap(list(terms)),
        )
        .order_by(Note.updated_at.desc())
        .limit(limit)
    )
    return (await session.execute(stmt)).scalars().all()


async def family(session: AsyncSession, scope: Scope, note_id: str) -> Sequence[Note]:
    """The note and the notes under ``<id>/`` (a state doc and its
    fragments), in id order."""
    stmt = (
        select(Note)
        .where(
            in_scope(scope),
            or_(Note.id == note_id, Note.id.startswith(note_id + "/", autoescape=True)),
        )
        .order_by(Note.id)
    )
    return (await session.execute(stmt)).scalars().all()


async def holding_key(
    session: AsyncSession, scope: Scope, *, key: str, after: str, limit: int
) -> Sequence[tuple[str, dict[str, Any]]]:
    """(id, tags) of the visible notes holding the tag ``key``, in id order
    after ``after``."""
    stmt = (
        select(Note.id, Note.tags)
        .where(
            in_scope(scope),
            ~Note.id.startswith(".", autoescape=True),
            Note.tags.has_key(key),
            Note.id > after,
        )
        .order_by(Note.id)
        .limit(limit)
    )
    return [(r[0], r[1]) for r in (await session.execute(stmt)).all()]


async def neighbours_in_time(
    session: AsyncSession,
    scope: Scope,
    *,
    anchor_id: str,
    anchor_time: datetime,
    terms: Sequence[str],
    before: int,
    after: int,
) -> tuple[Sequence[Note], Sequence[Note]]:
    """Visible notes just before and just after a moment, sharing any of ``terms``."""

    def base() -> Select[Note]:
        stmt = select(Note).where(
            in_scope(scope), Note.id != anchor_id, ~Note.id.startswith(".", autoescape=True)
        )
        if terms:
            stmt = stmt.where(Note.tag_index.overlap(list(terms)))
        return stmt

    earlier = (
        (
            await session.execute(
                base()
                .where(Note.updated_at <= anchor_time)
                .order_by(Note.updated_at.desc(), Note.id)
                .limit(before)
            )
        )
        .scalars()
        .all()
    )
    later = (
        (
            await session.execute(
                base()
                .where(Note.updated_at > anchor_time)
                .order_by(Note.updated_at, Note.id)
                .limit(after)
            )
        )
        .scalars()
        .all()
    )
    return list(reversed(earlier)), later
