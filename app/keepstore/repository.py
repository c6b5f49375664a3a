"""The reads keep's store protocol needs beyond the notes repository's
(all scoped to the key's tenant and project; row-level security applies)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, and_, cast, func, literal, or_, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Embedding, Note, NoteVersion, Part
from app.tenancy import Scope


def _notes(scope: Scope) -> ColumnElement[bool]:
    return and_(Note.tenant_id == scope.tenant_id, Note.project_id == scope.project_id)


async def with_content_hash(
    session: AsyncSession, scope: Scope, content_hash: str, *, exclude_id: str = ""
) -> Note | None:
    stmt = select(Note).where(_notes(scope), Note.content_hash == content_hash)
    if exclude_id:
        stmt = stmt.where(Note.id != exclude_id)
    return await session.scalar(stmt.order_by(Note.updated_at.desc()).limit(1))


async def with_tag(
    session: AsyncSession,
    scope: Scope,
    key: str,
    value: str | None,
    *,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    offset: int,
) -> Sequence[Note]:
    """Notes holding tag ``key`` (any value, or ``value`` exactly, alone or in
    a list), system tags included, newest first."""
    stmt = select(Note).where(_notes(scope), Note.tags.has_key(key))
    if value is not None:
        stmt = stmt.where(
            or_(
                Note.tags[key].astext == value,
                Note.tags[key].contains(cast(func.jsonb_build_array(literal(value)), JSONB)),
            )
        )
    if since is not None:
        stmt = stmt.where(Note.updated_at >= since)
    if until is not None:
        stmt = stmt.where(Note.updated_at < until)
    stmt = stmt.order_by(Note.updated_at.desc(), Note.id).limit(limit).offset(offset)
    return (await session.execute(stmt)).scalars().all()


async def notes_with_part(session: AsyncSession, scope: Scope, part_num: int) -> list[str]:
    rows = await session.execute(
        select(Part.note_id)
        .where(
            Part.tenant_id == scope.tenant_id,
            Part.project_id == scope.project_id,
            Part.part_num == part_num,
        )
        .order_by(Part.note_id)
    )
    return [r[0] for r in rows]


async def distinct_tag_keys(session: AsyncSession, scope: Scope) -> list[str]:
    key = func.jsonb_object_keys(Note.tags).column_valued("key")
    rows = await session.execute(
        select(key).select_from(Note).where(_notes(scope)).distinct().order_by(key)
    )
    return [str(r[0]) for r in rows if not str(r[0]).startswith("_")]


async def distinct_tag_values(session: AsyncSession, scope: Scope, key: str) -> list[str]:
    rows = await session.execute(
        select(Note.tags[key]).where(_notes(scope), Note.tags.has_key(key))
    )
    values: set[str] = set()
    for (raw,) in rows:
        for v in raw if isinstance(raw, list) else [raw]:
            if v is not None and v != "":
                values.add(str(v))
    return sorted(values)


async def count_versions(session: AsyncSession, scope: Scope) -> int:
    stmt = (
        select(func.count())
        .select_from(NoteVersion)
        .where(
            and_(
                NoteVersion.tenant_id == scope.tenant_id, NoteVersion.project_id == scope.project_id
            )
        )
    )
    return int(await session.scalar(stmt) or 0)


async def vectors_at(
    session: AsyncSession, scope: Scope, keys: Sequence[tuple[str, str, int]], model: str
) -> dict[tuple[str, str, int], list[float]]:
    """One model's vectors at (note id, kind, ref) keys."""
    if not keys:
        return {}
    rows = await session.execute(
        select(Embedding.note_id, Embedding.kind, Embedding.ref, Embedding.embedding).where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
            Embedding.note_id.in_(sorted({k[0] for k in keys})),
        )
    )
    wanted = set(keys)
    out = {}
    for note_id, kind, ref, vector in rows:
        if (note_id, kind, int(ref)) in wanted:
            out[(note_id, kind, int(ref))] = [float(x) for x in vector]
    return out


async def keys_of_model(
    session: AsyncSession, scope: Scope, model: str
) -> list[tuple[str, str, int]]:
    rows = await session.execute(
        select(Embedding.note_id, Embedding.kind, Embedding.ref)
        .where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
        )
        .order_by(Embedding.note_id, Embedding.kind, Embedding.ref)
    )
    return [(r[0], r[1], int(r[2])) for r in rows]
