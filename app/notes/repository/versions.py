"""The note_versions table: a note's archived history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    func,
    insert,
    literal,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Note, NoteVersion, Part
from app.notes.repository._shared import fts_of, in_scope
from app.tenancy import Scope


async def max_version(session: AsyncSession, scope: Scope, note_id: str) -> int:
    value = await session.scalar(
        select(func.max(NoteVersion.version)).where(
            NoteVersion.tenant_id == scope.tenant_id,
            NoteVersion.project_id == scope.project_id,
            NoteVersion.note_id == note_id,
        )
    )
    return int(value or 0)


async def archive_current(session: AsyncSession, scope: Scope, note_id: str) -> int:
    """Copy the note's current state into its history; returns the new version number."""
    version = await max_version(session, scope, note_id) + 1
    source = select(
        Note.tenant_id,
        Note.project_id,
        Note.id,
        literal(version),
        Note.summary,
        Note.tags,
        Note.content_hash,
        Note.created_at,
        Note.updated_at,
        Note.fts,
    ).where(in_scope(scope), Note.id == note_id)
    await session.execute(
        insert(NoteVersion).from_select(
            [
                "tenant_id",
                "project_id",
                "note_id",
                "version",
                "summary",
                "tags",
                "content_hash",
                "created_at",
                "updated_at",
                "fts",
            ],
            source,
        )
    )
    return version


async def insert_versions(
    session: AsyncSession, scope: Scope, note_id: str, rows: Sequence[dict[str, Any]]
) -> None:
    """Append history rows (already numbered) to a note, e.g. when moving versions."""
    if not rows:
        return
    await session.execute(
        insert(NoteVersion),
        [
            {"tenant_id": scope.tenant_id, "project_id": scope.project_id, "note_id": note_id, **r}
            for r in rows
        ],
    )


async def insert_version_text(
    session: AsyncSession, scope: Scope, note_id: str, *, values: dict[str, Any]
) -> None:
    """One history row from text (an imported version): its full text is
    indexed from its summary and tag words (``fts_text``, ``tag_text``)."""
    fts_text, tag_text = values.pop("fts_text"), values.pop("tag_text")
    await session.execute(
        insert(NoteVersion).values(
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            note_id=note_id,
            fts=fts_of(fts_text, tag_text),
            **values,
        )
    )


def _versions_of(scope: Scope, note_id: str) -> ColumnElement[bool]:
    return and_(
        NoteVersion.tenant_id == scope.tenant_id,
        NoteVersion.project_id == scope.project_id,
        NoteVersion.note_id == note_id,
    )


async def list_versions(
    session: AsyncSession, scope: Scope, note_id: str, *, limit: int, offset: int = 0
) -> Sequence[NoteVersion]:
    """History newest first."""
    stmt = (
        select(NoteVersion)
        .where(_versions_of(scope, note_id))
        .order_by(NoteVersion.version.desc())
        .limit(limit)
        .offset(offset)
    )
    return (await session.execute(stmt)).scalars().all()


async def all_versions(session: AsyncSession, scope: Scope, note_id: str) -> Sequence[NoteVersion]:
    """History oldest first."""
    stmt = select(NoteVersion).where(_versions_of(scope, note_id)).order_by(NoteVersion.version)
    return (await session.execute(stmt)).scalars().all()


async def count_versions(session: AsyncSession, scope: Scope, note_id: str) -> int:
    stmt = select(func.count()).select_from(NoteVersion).where(_versions_of(scope, note_id))
    return int(await session.scalar(stmt) or 0)


async def version_at(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    *,
    newest_offset: int | None = None,
    oldest_offset: int | None = None,
) -> NoteVersion | None:
    """The N-th newest (1 = previous) or N-th oldest (1 = oldest) archived version."""
    stmt = select(NoteVersion).where(_versions_of(scope, note_id))
    if newest_offset is not None:
        stmt = stmt.order_by(NoteVersion.version.desc()).offset(newest_offset - 1)
    else:
        stmt = stmt.order_by(NoteVersion.version).offset((oldest_offset or 1) - 1)
    return await session.scalar(stmt.limit(1))


async def version_number(
    session: AsyncSession, scope: Scope, note_id: str, version: int
) -> tuple[NoteVersion, int] | None:
    """A stored version and its offset from the current one (1 = previous)."""
    row = await session.scalar(
        select(NoteVersion).where(_versions_of(scope, note_id), NoteVersion.version == version)
    )
    if row is None:
        return None
    newer = await session.scalar(
        select(func.count())
        .select_from(NoteVersion)
        .where(_versions_of(scope, note_id), NoteVersion.version > version)
    )
    return row, int(newer or 0) + 1


async def delete_versions(
    session: AsyncSession, scope: Scope, note_id: str, versions: Sequence[int]
) -> None:
    if versions:
        await session.execute(
            delete(NoteVersion).where(
                _versions_of(scope, note_id), NoteVersion.version.in_(list(versions))
            )
        )


async def versions_of_many(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str]
) -> dict[str, list[NoteVersion]]:
    """Each note's history, oldest first."""
    if not note_ids:
        return {}
    rows = await session.execute(
        select(NoteVersion)
        .where(
            NoteVersion.tenant_id == scope.tenant_id,
            NoteVersion.project_id == scope.project_id,
            NoteVersion.note_id.in_(list(note_ids)),
        )
        .order_by(NoteVersion.note_id, NoteVersion.version)
    )
    out: dict[str, list[NoteVersion]] = {}
    for version in rows.scalars():
        out.setdefault(version.note_id, []).append(version)
    return out


async def count_history(
    session: AsyncSession, scope: Scope, *, include_hidden: bool
) -> tuple[int, int]:
    """(versions, parts) of the project's notes."""
    visible = [] if include_hidden else [~NoteVersion.note_id.startswith(".", autoescape=True)]
    versions = await session.scalar(
        select(func.count())
        .select_from(NoteVersion)
        .where(
            NoteVersion.tenant_id == scope.tenant_id,
            NoteVersion.project_id == scope.project_id,
            *visible,
        )
    )
    part_filter = [] if include_hidden else [~Part.note_id.startswith(".", autoescape=True)]
    parts = await session.scalar(
        select(func.count())
        .select_from(Part)
        .where(Part.tenant_id == scope.tenant_id, Part.project_id == scope.project_id, *part_filter)
    )
    return int(versions or 0), int(parts or 0)
