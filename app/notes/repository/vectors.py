"""The embeddings table: the vectors of notes, their versions and parts."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Embedding, Job, Note
from app.tenancy import Scope, TenantScope

INDEXED_DIMS = (384,)  # dimensions with an HNSW partial index (migration 0001)


def _of_note(scope: Scope, note_id: str) -> Any:
    return and_(
        Embedding.tenant_id == scope.tenant_id,
        Embedding.project_id == scope.project_id,
        Embedding.note_id == note_id,
    )


async def upsert(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    kind: str,
    model: str,
    rows: Sequence[tuple[int, str, Sequence[float]]],
) -> None:
    """A note's vectors of one kind: (ref, text hash, vector), 500 a statement."""
    made = [_row(scope, note_id, kind, ref, model, h, v) for ref, h, v in rows]
    for start in range(0, len(made), 500):
        await _upsert_rows(session, made[start : start + 500])


async def upsert_notes(
    session: AsyncSession,
    scope: Scope,
    *,
    model: str,
    rows: Sequence[tuple[str, str, Sequence[float]]],
) -> None:
    """Current-version vectors for several notes: (note id, text hash, vector)."""
    if rows:
        await _upsert_rows(
            session, [_row(scope, nid, "note", 0, model, h, v) for nid, h, v in rows]
        )


def _row(
    scope: Scope,
    note_id: str,
    kind: str,
    ref: int,
    model: str,
    content_hash: str,
    vector: Sequence[float],
) -> dict[str, Any]:
    return {
        "tenant_id": scope.tenant_id,
        "project_id": scope.project_id,
        "note_id": note_id,
        "kind": kind,
        "ref": ref,
        "model": model,
        "dim": len(vector),
        "content_hash": content_hash,
        "embedding": list(vector),
    }


async def _upsert_rows(session: AsyncSession, rows: list[dict[str, Any]]) -> None:
    # One statement executed for many parameter sets: its compiled form is
    # cached, unlike a multi-row VALUES whose shape changes with the batch.
    stmt = insert(Embedding)
    stmt = stmt.on_conflict_do_update(
        index_elements=["tenant_id", "project_id", "note_id", "kind", "ref", "model"],
        set_={
            "embedding": stmt.excluded.embedding,
            "dim": stmt.excluded.dim,
            "content_hash": stmt.excluded.content_hash,
            "created_at": func.now(),
        },
    )
    await session.execute(stmt, rows)


async def vectors_for_hashes(
    session: AsyncSession, tenant: TenantScope, model: str, content_hashes: Sequence[str]
) -> dict[str, list[float]]:
    """Existing vectors of the same texts and model in this tenant (dedup)."""
    if not content_hashes:
        return {}
    rows = await session.execute(
        select(Embedding.content_hash, Embedding.embedding).where(
            Embedding.tenant_id == tenant.tenant_id,
            Embedding.model == model,
            Embedding.content_hash.in_(list(set(content_hashes))),
        )
    )
    return {r[0]: [float(x) for x in r[1]] for r in rows if r[0] is not None}


async def vector_of(
    session: AsyncSession, scope: Scope, note_id: str, model: str
) -> list[float] | None:
    value = await session.scalar(
        select(Embedding.embedding).where(
            _of_note(scope, note_id), Embedding.kind == "note", Embedding.model == model
        )
    )
    return None if value is None else [float(x) for x in value]


async def delete_for_note(
    session: AsyncSession, scope: Scope, note_id: str, *, kind: str | None = None
) -> None:
    stmt = delete(Embedding).where(_of_note(scope, note_id))
    if kind is not None:
        stmt = stmt.where(Embedding.kind == kind)
    await session.execute(stmt)


async def archive_note_vectors(
    session: AsyncSession, scope: Scope, note_id: str, version: int
) -> None:
    """The current vectors become the vectors of the version just archived."""
    await session.execute(
        update(Embedding)
        .where(_of_note(scope, note_id), Embedding.kind == "note")
        .values(kind="version", ref=version)
    )


async def delete_versions(
    session: AsyncSession, scope: Scope, note_id: str, versions: Sequence[int]
) -> None:
    if versions:
        await session.execute(
            delete(Embedding).where(
                _of_note(scope, note_id),
                Embedding.kind == "version",
                Embedding.ref.in_(list(versions)),
            )
        )


async def restore_version_vectors(
    session: AsyncSession, scope: Scope, note_id: str, version: int
) -> None:
    await delete_for_note(session, scope, note_id, kind="note")
    await session.execute(
        update(Embedding)
        .where(_of_note(scope, note_id), Embedding.kind == "version", Embedding.ref == version)
        .values(kind="note", ref=0)
    )


async def notes_missing_model(
    session: AsyncSession, *, model: str, limit: int
) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """User notes (any tenant; system context) with text, no vector of
    ``model`` and no embedding work already on its way. Notes without text
    (the stubs edge tags make) need no vector: they are never queued."""
    has_vector = (
        select(Embedding.note_id)
        .where(
            Embedding.tenant_id == Note.tenant_id,
            Embedding.project_id == Note.project_id,
            Embedding.note_id == Note.id,
            Embedding.kind == "note",
            Embedding.model == model,
        )
        .exists()
    )
    has_job = (
        select(Job.id)
        .where(
            Job.tenant_id == Note.tenant_id,
            Job.project_id == Note.project_id,
            Job.note_id == Note.id,
            Job.kind.in_(["embed", "reindex"]),
            Job.status.in_(["pending", "dispatched", "running"]),
        )
        .exists()
    )
    missing = (
        select(Note.tenant_id, Note.project_id, Note.id)
        .where(
            ~Note.id.startswith(".", autoescape=True),
            func.btrim(func.coalesce(func.nullif(Note.pending_content, ""), Note.summary)) != "",
            ~has_vector,
            ~has_job,
        )
        .limit(limit)
    )
    return [(r[0], r[1], r[2]) for r in (await session.execute(missing)).all()]


async def vectors_of(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str], model: str
) -> dict[str, list[float]]:
    if not note_ids:
        return {}
    rows = await session.execute(
        select(Embedding.note_id, Embedding.embedding).where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.note_id.in_(list(note_ids)),
            Embedding.kind == "note",
            Embedding.model == model,
        )
    )
    return {r[0]: [float(x) for x in r[1]] for r in rows}


async def delete_of_model(
    session: AsyncSession, scope: Scope, note_id: str, *, model: str, kind: str | None = None
) -> int:
    """Delete one model's vectors of a note (all kinds, or one)."""
    stmt = delete(Embedding).where(_of_note(scope, note_id), Embedding.model == model)
    if kind is not None:
        stmt = stmt.where(Embedding.kind == kind)
    result = await session.execute(stmt.returning(Embedding.note_id))
    return len(result.all())


@dataclass(frozen=True, slots=True)
class Near:
    note_id: str
    kind: str
    ref: int
    distance: float  # cosine distance, 0 (same direction) to 2


async def nearest(
    session: AsyncSession,
    scope: Scope,
    vector: Sequence[float],
    *,
    model: str,
    limit: int,
    kinds: Sequence[str] = ("note",),
) -> list[Near]:
    """One model's vectors of the project nearest to ``vector`` (exact scan:
    for vectors a local keep stored, which have no index of their own)."""
    distance = Embedding.embedding.cosine_distance(list(vector))
    rows = await session.execute(
        select(Embedding.note_id, Embedding.kind, Embedding.ref, distance)
        .where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
            Embedding.dim == len(vector),
            Embedding.kind.in_(list(kinds)),
        )
        .order_by(distance)
        .limit(limit)
    )
    return [Near(r[0], r[1], int(r[2]), float(r[3])) for r in rows]


async def models_of(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str], model: str
) -> set[str]:
    """Which of the notes have a current vector of this model."""
    if not note_ids:
        return set()
    rows = await session.execute(
        select(Embedding.note_id).where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.note_id.in_(list(note_ids)),
            Embedding.kind == "note",
            Embedding.model == model,
        )
    )
    return {r[0] for r in rows}


async def delete_part_vectors(
    session: AsyncSession, scope: Scope, note_id: str, part_nums: Sequence[int]
) -> None:
    """Every model's vectors of these parts of a note."""
    if part_nums:
        await session.execute(
            delete(Embedding).where(
                _of_note(scope, note_id),
                Embedding.kind == "part",
                Embedding.ref.in_(list(part_nums)),
            )
        )
