"""The notes table: one note's row read, inserted, updated and deleted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import undefer

from app.models import Note
from app.notes.repository._shared import FTS_CONFIG, fts_of, fts_of_params, in_scope, stamped
from app.tenancy import Scope


async def get(
    session: AsyncSession, scope: Scope, note_id: str, *, lock: bool = False, fts: bool = False
) -> Note | None:
    stmt = select(Note).where(in_scope(scope), Note.id == note_id)
    if fts:
        stmt = stmt.options(undefer(Note.fts))
    if lock:
        stmt = stmt.with_for_update()
    return await session.scalar(stmt)


async def get_many(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str], *, lock: bool = False
) -> dict[str, Note]:
    stmt = select(Note).where(in_scope(scope), Note.id.in_(list(note_ids)))
    if lock:
        stmt = stmt.with_for_update()
    return {n.id: n for n in (await session.execute(stmt)).scalars()}


async def insert_note(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    values: dict[str, Any],
    fts_text: str,
    tag_text: str,
) -> Note | None:
    """Insert a new note; None when a concurrent request created it first."""
    return await session.scalar(
        pg_insert(Note)
        .values(
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            id=note_id,
            **{"fts": fts_of(fts_text, tag_text), **stamped(scope, values)},
        )
        .on_conflict_do_nothing(index_elements=["tenant_id", "project_id", "id"])
        .returning(Note)
    )


async def insert_notes(
    session: AsyncSession, scope: Scope, rows: Sequence[tuple[str, dict[str, Any], str, str]]
) -> dict[str, Note]:
    """Insert new notes in one round trip: (id, values, fts text, tag text)
    each. Returns the notes inserted by id; an id that exists already is left
    out (the caller updates it the way one put would). One cached statement,
    its rows sent together (SQLAlchemy's insertmanyvalues): compiling a
    hundred-row VALUES list every time cost more than the insert."""
    if not rows:
        return {}
    stmt = (
        pg_insert(Note)
        .values(fts=fts_of_params())
        .on_conflict_do_nothing(index_elements=["tenant_id", "project_id", "id"])
        .returning(Note)
    )
    params = [
        {
            "tenant_id": scope.tenant_id,
            "project_id": scope.project_id,
            "id": note_id,
            "fts_text": fts_text,
            "tag_text": tag_text,
            **stamped(scope, values),
        }
        for note_id, values, fts_text, tag_text in rows
    ]
    return {n.id: n for n in (await session.scalars(stmt, params)).all()}


async def update_note(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    *,
    values: dict[str, Any],
    fts_text: str | None = None,
    tag_text: str | None = None,
) -> Note:
    values = stamped(scope, values)
    if fts_text is not None and tag_text is not None:
        values = {**values, "fts": fts_of(fts_text, tag_text)}
    elif tag_text is not None:
        # Content is no longer held: re-weight the tags, keep the content's lexemes
        # (stored with the default weight D; tags carry weight A).
        values = {
            **values,
            "fts": func.setweight(func.to_tsvector(FTS_CONFIG, tag_text), literal_column("'A'")).op(
                "||"
            )(func.ts_filter(Note.fts, literal_column("'{d}'::\"char\"[]"))),
        }
    row = await session.scalar(
        update(Note)
        .where(in_scope(scope), Note.id == note_id)
        .values(**values)
        .returning(Note)
        .execution_options(populate_existing=True)
    )
    assert row is not None, "update_note on a note that is not there"
    return row


async def delete_note(session: AsyncSession, scope: Scope, note_id: str) -> bool:
    """Delete a note; its versions, parts and vectors go with it (FK cascade)."""
    result = await session.execute(
        delete(Note).where(in_scope(scope), Note.id == note_id).returning(Note.id)
    )
    return result.first() is not None


async def set_expiry(
    session: AsyncSession, scope: Scope, note_id: str, *, expires_at: datetime | None
) -> bool:
    """Set when the note expires (None: never); False when it is not there."""
    result = await session.execute(
        update(Note)
        .where(in_scope(scope), Note.id == note_id)
        .values(expires_at=expires_at)
        .returning(Note.id)
    )
    return result.first() is not None


async def touch_accessed(session: AsyncSession, scope: Scope, note_id: str, when: datetime) -> None:
    await session.execute(
        update(Note).where(in_scope(scope), Note.id == note_id).values(accessed_at=when)
    )


async def clear_pending_content(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str]
) -> None:
    """Drop held original content once background work no longer needs it."""
    await session.execute(
        update(Note)
        .where(in_scope(scope), Note.id.in_(list(note_ids)))
        .values(pending_content=None)
    )
