"""All SQL touching notes, note_versions and parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Text,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import undefer

from app.kit import tags as tagrules
from app.models import Note, NoteVersion, Part
from app.tenancy import Scope

FTS_CONFIG = "english"


def _fts(text_value: str, tag_text: str) -> ColumnElement[Any]:
    return func.setweight(func.to_tsvector(FTS_CONFIG, tag_text), literal_column("'A'")).op("||")(
        func.to_tsvector(FTS_CONFIG, text_value)
    )


def _in_scope(scope: Scope) -> ColumnElement[bool]:
    return and_(Note.tenant_id == scope.tenant_id, Note.project_id == scope.project_id)


async def get(
    session: AsyncSession, scope: Scope, note_id: str, *, lock: bool = False, fts: bool = False
) -> Note | None:
    stmt = select(Note).where(_in_scope(scope), Note.id == note_id)
    if fts:
        stmt = stmt.options(undefer(Note.fts))
    if lock:
        stmt = stmt.with_for_update()
    return await session.scalar(stmt)


async def get_many(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str], *, lock: bool = False
) -> dict[str, Note]:
    stmt = select(Note).where(_in_scope(scope), Note.id.in_(list(note_ids)))
    if lock:
        stmt = stmt.with_for_update()
    return {n.id: n for n in (await session.execute(stmt)).scalars()}


def _stamped(scope: Scope, values: dict[str, Any]) -> dict[str, Any]:
    """A tag-scoped credential's writes carry its scope's tags (row-level
    security refuses a note without them)."""
    if not scope.tag_terms or "tags" not in values:
        return values
    tags = tagrules.stamp(values["tags"], scope.tag_terms)
    return {**values, "tags": tags, "tag_index": tagrules.index_terms(tags)}


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
            **{"fts": _fts(fts_text, tag_text), **_stamped(scope, values)},
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
        .values(fts=_fts_params())
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
            **_stamped(scope, values),
        }
        for note_id, values, fts_text, tag_text in rows
    ]
    return {n.id: n for n in (await session.scalars(stmt, params)).all()}


def _fts_params() -> ColumnElement[Any]:
    """``_fts`` of each row's own ``fts_text`` and ``tag_text`` parameters."""
    return func.setweight(
        func.to_tsvector(FTS_CONFIG, bindparam("tag_text", type_=Text)), literal_column("'A'")
    ).op("||")(func.to_tsvector(FTS_CONFIG, bindparam("fts_text", type_=Text)))


async def update_note(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    *,
    values: dict[str, Any],
    fts_text: str | None = None,
    tag_text: str | None = None,
) -> Note:
    values = _stamped(scope, values)
    if fts_text is not None and tag_text is not None:
        values = {**values, "fts": _fts(fts_text, tag_text)}
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
        .where(_in_scope(scope), Note.id == note_id)
        .values(**values)
        .returning(Note)
        .execution_options(populate_existing=True)
    )
    assert row is not None, "update_note on a note that is not there"
    return row


async def delete_note(session: AsyncSession, scope: Scope, note_id: str) -> bool:
    """Delete a note; its versions, parts and vectors go with it (FK cascade)."""
    result = await session.execute(
        delete(Note).where(_in_scope(scope), Note.id == note_id).returning(Note.id)
    )
    return result.first() is not None


async def touch_accessed(session: AsyncSession, scope: Scope, note_id: str, when: datetime) -> None:
    await session.execute(
        update(Note).where(_in_scope(scope), Note.id == note_id).values(accessed_at=when)
    )


async def count(session: AsyncSession, scope: Scope, *, include_hidden: bool = False) -> int:
    stmt = select(func.count()).select_from(Note).where(_in_scope(scope))
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
    stmt = select(Note).where(_in_scope(scope))
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


# -- versions -------------------------------------------------------------


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
    ).where(_in_scope(scope), Note.id == note_id)
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
            fts=_fts(fts_text, tag_text),
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


async def delete_versions(
    session: AsyncSession, scope: Scope, note_id: str, versions: Sequence[int]
) -> None:
    if versions:
        await session.execute(
            delete(NoteVersion).where(
                _versions_of(scope, note_id), NoteVersion.version.in_(list(versions))
            )
        )


# -- parts ----------------------------------------------------------------


def _parts_of(scope: Scope, note_id: str) -> ColumnElement[bool]:
    return and_(
        Part.tenant_id == scope.tenant_id,
        Part.project_id == scope.project_id,
        Part.note_id == note_id,
    )


async def list_parts(session: AsyncSession, scope: Scope, note_id: str) -> Sequence[Part]:
    stmt = select(Part).where(_parts_of(scope, note_id)).order_by(Part.part_num)
    return (await session.execute(stmt)).scalars().all()


async def get_part(session: AsyncSession, scope: Scope, note_id: str, part_num: int) -> Part | None:
    return await session.scalar(
        select(Part).where(_parts_of(scope, note_id), Part.part_num == part_num)
    )


async def delete_parts(session: AsyncSession, scope: Scope, note_id: str) -> int:
    result = await session.execute(
        delete(Part).where(_parts_of(scope, note_id)).returning(Part.part_num)
    )
    return len(result.all())


async def insert_parts(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    parts: Sequence[tuple[int, str, dict[str, Any], str, str]],
) -> None:
    """Insert parts as (part_num, summary, tags, content_hash, text for full text)."""
    for part_num, summary, tags, content_hash, fts_text in parts:
        await session.execute(
            insert(Part).values(
                tenant_id=scope.tenant_id,
                project_id=scope.project_id,
                note_id=note_id,
                part_num=part_num,
                summary=summary,
                tags=tags,
                content_hash=content_hash,
                fts=func.to_tsvector(FTS_CONFIG, fts_text),
            )
        )


async def sharing_tags(
    session: AsyncSession, scope: Scope, *, terms: Sequence[str], exclude: str, limit: int
) -> Sequence[Note]:
    """Visible notes holding at least one of these ``key=value`` tag terms."""
    stmt = (
        select(Note)
        .where(
            _in_scope(scope),
            Note.id != exclude,
            ~Note.id.startswith(".", autoescape=True),
            Note.tag_index.overlap(list(terms)),
        )
        .order_by(Note.updated_at.desc())
        .limit(limit)
    )
    return (await session.execute(stmt)).scalars().all()


async def clear_pending_content(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str]
) -> None:
    """Drop held original content once background work no longer needs it."""
    await session.execute(
        update(Note)
        .where(_in_scope(scope), Note.id.in_(list(note_ids)))
        .values(pending_content=None)
    )


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
            _in_scope(scope), Note.id != anchor_id, ~Note.id.startswith(".", autoescape=True)
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


# -- export ---------------------------------------------------------------


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


async def parts_of_many(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str]
) -> dict[str, list[Part]]:
    if not note_ids:
        return {}
    rows = await session.execute(
        select(Part)
        .where(
            Part.tenant_id == scope.tenant_id,
            Part.project_id == scope.project_id,
            Part.note_id.in_(list(note_ids)),
        )
        .order_by(Part.note_id, Part.part_num)
    )
    out: dict[str, list[Part]] = {}
    for part in rows.scalars():
        out.setdefault(part.note_id, []).append(part)
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
