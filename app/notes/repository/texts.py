"""The note_texts table: a note's normalised text, compressed, when its
project keeps text (migration 0018)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Integer, case, cast, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Note, NoteText
from app.tenancy import Scope


def _of(scope: Scope, note_id: str) -> Sequence[Any]:
    return (
        NoteText.tenant_id == scope.tenant_id,
        NoteText.project_id == scope.project_id,
        NoteText.note_id == note_id,
    )


async def upsert(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    sha256: str,
    chars: int,
    data: bytes,
    segments: list[Any],
) -> None:
    stmt = insert(NoteText).values(
        tenant_id=scope.tenant_id,
        project_id=scope.project_id,
        note_id=note_id,
        sha256=sha256,
        chars=chars,
        data=data,
        segments=segments,
    )
    await session.execute(
        stmt.on_conflict_do_update(
            index_elements=[NoteText.tenant_id, NoteText.project_id, NoteText.note_id],
            set_={
                "sha256": stmt.excluded.sha256,
                "chars": stmt.excluded.chars,
                "data": stmt.excluded.data,
                "segments": stmt.excluded.segments,
                "updated_at": func.now(),
            },
        )
    )


async def get(session: AsyncSession, scope: Scope, note_id: str) -> NoteText | None:
    return await session.scalar(select(NoteText).where(*_of(scope, note_id)))


async def sha_of(session: AsyncSession, scope: Scope, note_id: str) -> str | None:
    return await session.scalar(select(NoteText.sha256).where(*_of(scope, note_id)))


async def remove(session: AsyncSession, scope: Scope, note_id: str) -> bool:
    result = await session.execute(
        delete(NoteText).where(*_of(scope, note_id)).returning(NoteText.note_id)
    )
    return result.first() is not None


async def kept_ids(session: AsyncSession, scope: Scope, *, after: str, limit: int) -> list[str]:
    """Ids of the project's notes with kept text, in id order after ``after``."""
    rows = await session.execute(
        select(NoteText.note_id)
        .where(
            NoteText.tenant_id == scope.tenant_id,
            NoteText.project_id == scope.project_id,
            NoteText.note_id > after,
        )
        .order_by(NoteText.note_id)
        .limit(limit)
    )
    return [r[0] for r in rows]


async def long_notes(
    session: AsyncSession, scope: Scope, *, min_chars: int, after: str, limit: int
) -> list[tuple[str, str | None, bool, bool]]:
    """The project's user notes longer than ``min_chars`` (as put), in id
    order after ``after``: (id, content hash, content held, text kept)."""
    kept = (
        select(NoteText.note_id)
        .where(
            NoteText.tenant_id == Note.tenant_id,
            NoteText.project_id == Note.project_id,
            NoteText.note_id == Note.id,
        )
        .exists()
    )
    length = Note.tags["_content_length"].astext
    rows = await session.execute(
        select(Note.id, Note.content_hash, Note.pending_content.is_not(None), kept)
        .where(
            Note.tenant_id == scope.tenant_id,
            Note.project_id == scope.project_id,
            Note.id > after,
            func.left(Note.id, 1) != ".",
            case((length.op("~")(r"^[0-9]{1,9}$"), cast(length, Integer)), else_=0) > min_chars,
        )
        .order_by(Note.id)
        .limit(limit)
    )
    return [(r[0], r[1], bool(r[2]), bool(r[3])) for r in rows]
