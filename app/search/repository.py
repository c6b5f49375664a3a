"""All SQL of find: the vector stage and the full-text stage.

Both stages apply the same filters to the note a hit belongs to (tags,
time, id glob, hidden), inside the query, so a filter never starves the
results the way filtering an approximate index scan afterwards would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Text, and_, func, literal_column, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.embeddings.repository import INDEXED_DIMS
from app.models import Embedding, Note, NoteVersion, Part

FTS_CONFIG = "english"
MAX_TERMS = 12
EXACT_BELOW = 10_000  # vectors in a project: below this, exact search is fast and exact


@dataclass(frozen=True, slots=True)
class Filters:
    tag_terms: Sequence[str] = ()
    since: datetime | None = None
    until: datetime | None = None
    id_regex: str | None = None
    include_hidden: bool = False
    exclude_ids: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Hit:
    note_id: str
    kind: str  # note | part | version
    ref: int
    score: float  # cosine similarity, or full-text rank
    updated_at: datetime


def _note_filters(scope: Scope, f: Filters) -> list[Any]:
    conds: list[Any] = [Note.tenant_id == scope.tenant_id, Note.project_id == scope.project_id]
    if f.tag_terms:
        conds.append(Note.tag_index.contains(list(f.tag_terms)))
    if f.since is not None:
        conds.append(Note.updated_at >= f.since)
    if f.until is not None:
        conds.append(Note.updated_at < f.until)
    if f.id_regex:
        conds.append(Note.id.regexp_match(f.id_regex))
    if not f.include_hidden:
        conds.append(~Note.id.startswith(".", autoescape=True))
    if f.exclude_ids:
        conds.append(Note.id.not_in(list(f.exclude_ids)))
    return conds


def _joins_note(entity: Any, note_column: Any) -> Any:
    return and_(
        Note.tenant_id == entity.tenant_id,
        Note.project_id == entity.project_id,
        Note.id == note_column,
    )


async def semantic(
    session: AsyncSession,
    scope: Scope,
    *,
    vector: Sequence[float],
    model: str,
    kinds: Sequence[str],
    filters: Filters,
    limit: int,
    big: bool,
) -> list[Hit]:
    """Nearest vectors of this project and model, filters applied in the scan.

    pgvector's iterative index scan keeps reading the HNSW graph until enough
    rows pass the filters (relaxed order: we re-sort by distance here).
    """
    # Planner strategy, measured in bench/search.py: a small project is searched
    # exactly (its rows through the tenant-leading btree, then sorted: a few ms);
    # a big one through the HNSW index with pgvector's iterative scan, which keeps
    # reading the graph until enough rows pass the filters. The planner's own
    # estimate prefers the exact path even at 20k rows (35 ms), so it is told.
    await session.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
    await session.execute(text(f"SET LOCAL hnsw.ef_search = {max(40, min(limit, 1000))}"))
    if big:
        await session.execute(text("SET LOCAL enable_sort = off"))
    dim = len(vector)
    literal = "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"
    if dim in INDEXED_DIMS:
        column: Any = literal_column(f"embeddings.embedding::vector({dim})")
        query_vec: Any = text(f"CAST(:qv AS vector({dim}))").bindparams(qv=literal)
    else:
        column = Embedding.embedding
        query_vec = text("CAST(:qv AS vector)").bindparams(qv=literal)
    distance = column.op("<=>")(query_vec)
    stamp = func.coalesce(NoteVersion.updated_at, Note.updated_at)
    stmt = (
        select(
            Embedding.note_id, Embedding.kind, Embedding.ref, distance.label("d"), stamp.label("ts")
        )
        .join(Note, _joins_note(Embedding, Embedding.note_id))
        .outerjoin(
            NoteVersion,
            and_(
                Embedding.kind == "version",
                NoteVersion.tenant_id == Embedding.tenant_id,
                NoteVersion.project_id == Embedding.project_id,
                NoteVersion.note_id == Embedding.note_id,
                NoteVersion.version == Embedding.ref,
            ),
        )
        .where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
            Embedding.dim == dim,
            Embedding.kind.in_(list(kinds)),
            *_note_filters(scope, filters),
        )
        .order_by(distance)
        .limit(limit)
    )
    rows = (await session.execute(stmt)).all()
    if big:
        await session.execute(text("SET LOCAL enable_sort = on"))
    hits = [Hit(r.note_id, r.kind, r.ref, 1.0 - float(r.d), r.ts) for r in rows]
    return sorted(hits, key=lambda h: -h.score)


async def full_text(
    session: AsyncSession,
    scope: Scope,
    *,
    query: str,
    kinds: Sequence[str],
    filters: Filters,
    limit: int,
) -> list[Hit]:
    """Full-text matches (notes, parts, versions), best ``ts_rank_cd`` first.

    Questions are natural language: any of their (stemmed, non-stop) words
    may match, and notes matching more of them rank higher. Requiring all of
    them, as web search syntax does, finds almost nothing for a question.
    """
    words = func.string_to_array(
        func.cast(func.plainto_tsquery(FTS_CONFIG, query), Text),
        literal_column("' & '"),
        type_=ARRAY(Text),
    )
    # The lexemes are already stemmed: re-parse them with 'simple', unchanged.
    # At most MAX_TERMS of them: a paragraph-long query would otherwise match
    # (and rank) most of a large project.
    tsq = func.to_tsquery(
        "simple",
        func.array_to_string(words[1:MAX_TERMS], literal_column("' | '")),
    )

    hits: list[Hit] = []
    if "note" in kinds:
        rank = func.ts_rank_cd(Note.fts, tsq)
        stmt = (
            select(Note.id, rank.label("r"), Note.updated_at)
            .where(*_note_filters(scope, filters), Note.fts.op("@@")(tsq))
            .order_by(rank.desc())
            .limit(limit)
        )
        hits += [Hit(r[0], "note", 0, float(r[1]), r[2]) for r in await session.execute(stmt)]
    if "part" in kinds:
        rank = func.ts_rank_cd(Part.fts, tsq)
        stmt = (
            select(Part.note_id, Part.part_num, rank.label("r"), Note.updated_at)
            .join(Note, _joins_note(Part, Part.note_id))
            .where(*_note_filters(scope, filters), Part.fts.op("@@")(tsq))
            .order_by(rank.desc())
            .limit(limit)
        )
        hits += [Hit(r[0], "part", r[1], float(r[2]), r[3]) for r in await session.execute(stmt)]
    if "version" in kinds:
        rank = func.ts_rank_cd(NoteVersion.fts, tsq)
        stmt = (
            select(
                NoteVersion.note_id, NoteVersion.version, rank.label("r"), NoteVersion.updated_at
            )
            .join(Note, _joins_note(NoteVersion, NoteVersion.note_id))
            .where(*_note_filters(scope, filters), NoteVersion.fts.op("@@")(tsq))
            .order_by(rank.desc())
            .limit(limit)
        )
        hits += [Hit(r[0], "version", r[1], float(r[2]), r[3]) for r in await session.execute(stmt)]
    return sorted(hits, key=lambda h: -h.score)[:limit]


async def vector_count(session: AsyncSession, scope: Scope, model: str, *, cap: int) -> int:
    """How many vectors the project has, counting no further than ``cap``."""
    inner = (
        select(Embedding.note_id)
        .where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
        )
        .limit(cap)
        .subquery()
    )
    return int(await session.scalar(select(func.count()).select_from(inner)) or 0)
