"""The parts table: a note's parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Part
from app.notes.repository._shared import FTS_CONFIG
from app.tenancy import Scope


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


async def get_parts_many(
    session: AsyncSession, scope: Scope, refs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], Part]:
    """Several notes' parts by (note id, part number), in one statement."""
    if not refs:
        return {}
    rows = await session.execute(
        select(Part).where(
            Part.tenant_id == scope.tenant_id,
            Part.project_id == scope.project_id,
            tuple_(Part.note_id, Part.part_num).in_(list(dict.fromkeys(refs))),
        )
    )
    return {(p.note_id, p.part_num): p for p in rows.scalars()}


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
    *,
    spans: Sequence[tuple[int, int, dict[str, Any]] | None] = (),
) -> None:
    """Insert parts as (part_num, summary, tags, content_hash, text for full
    text), with each passage's (span_start, span_end, locator) when given,
    in one round trip."""
    if not parts:
        return
    stmt = insert(Part).values(fts=func.to_tsvector(FTS_CONFIG, bindparam("fts_text", type_=Text)))
    located = list(spans) + [None] * (len(parts) - len(spans))
    params = [
        {
            "tenant_id": scope.tenant_id,
            "project_id": scope.project_id,
            "note_id": note_id,
            "part_num": part_num,
            "summary": summary,
            "tags": tags,
            "content_hash": content_hash,
            "fts_text": fts_text,
            "span_start": where[0] if where else None,
            "span_end": where[1] if where else None,
            "locator": where[2] if where else None,
        }
        for (part_num, summary, tags, content_hash, fts_text), where in zip(
            parts, located, strict=True
        )
    ]
    await session.execute(stmt, params)


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


async def passages_among(
    session: AsyncSession, scope: Scope, refs: Sequence[tuple[str, int]]
) -> set[tuple[str, int]]:
    """Which of these (note id, part number) are passages (parts with a span,
    cut by the chunk job; analyze's parts have none)."""
    if not refs:
        return set()
    rows = await session.execute(
        select(Part.note_id, Part.part_num).where(
            Part.tenant_id == scope.tenant_id,
            Part.project_id == scope.project_id,
            tuple_(Part.note_id, Part.part_num).in_(list(refs)),
            Part.span_start.is_not(None),
        )
    )
    return {(r[0], r[1]) for r in rows}
