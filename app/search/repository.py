"""SQL of find's vector stage and of what follows both stages: the
opening statement (counts and planner settings), cosines of candidates,
timeline neighbours. The full-text stage's SQL is ``app.search.fulltext``'s.

Both stages apply the same filters to the note a hit belongs to (tags,
time, id glob, hidden), inside the query, so a filter never starves the
results the way filtering an approximate index scan afterwards would.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Float,
    Text,
    and_,
    any_,
    cast,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.timeutil import keep_ts
from app.models import Embedding, Note, NoteVersion
from app.notes.repository.vectors import INDEXED_DIMS
from app.search.ranking import Key
from app.tenancy import Scope

EXACT_BELOW = 10_000  # vectors in a project: below this, exact search is fast and exact


@dataclass(frozen=True, slots=True)
class Filters:
    tag_terms: Sequence[str] = ()
    since: datetime | None = None
    until: datetime | None = None
    id_regex: str | None = None
    include_hidden: bool = False
    exclude_ids: Sequence[str] = ()
    #: Notes a newer one replaced (tagged ``superseded_by``) are left out
    #: unless asked for; ``as_of`` leaves out notes made after it and keeps
    #: those replaced only after it (``superseded_at``, compared as keep's
    #: timestamps: UTC to the second, which sort as the times do).
    include_superseded: bool = False
    as_of: datetime | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    note_id: str
    kind: str  # note | part | version
    ref: int
    score: float  # cosine similarity, or full-text rank
    updated_at: datetime
    created_at: datetime
    tags: frozenset[str] = frozenset()  # the note's tags as key=value terms (case-folded)


def key_value_terms(index: Sequence[str] | None) -> frozenset[str]:
    """The ``key=value`` terms of a note's ``tag_index`` (not its bare keys)."""
    return frozenset(t for t in index or () if "=" in t)


def note_filters(scope: Scope, f: Filters) -> list[Any]:
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
    if f.as_of is not None:
        conds.append(Note.created_at <= f.as_of)
    if not f.include_superseded:
        current = ~Note.tag_index.contains(["superseded_by"])
        if f.as_of is not None:
            then = keep_ts(f.as_of)
            current = or_(current, Note.tags["superseded_at"].astext > then)
        conds.append(current)
    return conds


def any_ids(note_ids: Sequence[str]) -> Any:
    """``= ANY(one array parameter)``: unlike an IN list, the statement's text
    does not change with the number of ids, so each connection prepares it
    once (asyncpg), not once per list length."""
    return any_(literal(list(note_ids), ARRAY(Text(collation="C"))))


def joins_note(entity: Any, note_column: Any) -> Any:
    return and_(
        Note.tenant_id == entity.tenant_id,
        Note.project_id == entity.project_id,
        Note.id == note_column,
    )


@dataclass(frozen=True, slots=True)
class Opening:
    vectors: int  # the project's vectors of the model, counted up to EXACT_BELOW
    extra: tuple[Any, ...]  # the values of the ``also`` expressions, in order

    @property
    def big(self) -> bool:
        return self.vectors >= EXACT_BELOW


async def open_find(
    session: AsyncSession,
    scope: Scope,
    *,
    model: str,
    candidates: int,
    also: Sequence[Any] = (),
    known_big: bool = False,
) -> Opening:
    """find's first statement: how many vectors the project has (which decides
    the vector stage's path), the values of ``also`` (scalar subqueries other
    repositories build: the project's settings, its pending work), and the
    planner settings of the rest of the transaction, in one round trip.

    Planner strategy, measured in bench/search.py: a small project is searched
    exactly (its rows through the tenant-leading btree, then sorted: a few
    ms); a big one through the HNSW index with pgvector's iterative scan,
    which keeps reading the graph until enough rows pass the filters (relaxed
    order: ``semantic`` re-sorts). The planner's own estimate prefers the
    exact path even at 20k rows (35 ms), so sorting is disabled (see below).
    Every statement is planned with its own values: a generic plan cached on
    the connection ignores these settings (a big project's search ran as a
    full sort, seconds at 100k).
    Counting up to EXACT_BELOW costs milliseconds, so the caller may say that
    it knows the project is big (``known_big``)."""
    counted = (
        select(Embedding.note_id)
        .where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
        )
        .limit(EXACT_BELOW)
        .subquery()
    )
    count: Any = select(func.count()).select_from(counted).scalar_subquery()
    if known_big:  # counted a moment ago: big projects do not shrink that fast
        count = literal(EXACT_BELOW)
    settings = {
        "plan_cache_mode": literal("force_custom_plan"),
        "hnsw.iterative_scan": literal("relaxed_order"),
        "hnsw.ef_search": literal(str(max(40, min(candidates, 1000)))),
        # No statement of find has a choice between sorting and not but the
        # two that must not sort: the HNSW path of a big project and the
        # timeline probe (``neighbours_query``), which estimated on a few rows
        # would rather read notes by time and sort the ties (an import stamped
        # with one time is all ties: 150 ms a find at 1M). The exact path of a
        # small project orders by an expression no index has, so it sorts
        # whatever this says, as do the text stage's rankings.
        "enable_sort": literal("off"),
        "enable_incremental_sort": literal("off"),
    }
    configured = [func.set_config(name, value, True) for name, value in settings.items()]
    row = (await session.execute(select(count, *also, *configured))).one()
    return Opening(int(row[0] or 0), tuple(row[1 : 1 + len(also)]))


def _vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form; one find sends its query vector in up to three
    statements, and formatting 384 floats costs more than half a millisecond."""
    return _literal(tuple(vector))


@functools.lru_cache(maxsize=256)
def _literal(vector: tuple[float, ...]) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


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
    cosines_of: Sequence[Key] = (),
) -> tuple[list[Hit], dict[Key, float]]:
    """Nearest vectors of this project and model, filters applied in the scan
    (planner settings: ``open_find``), best first; and, in the same round trip,
    the cosine of the ``cosines_of`` items' own vectors (items not embedded
    yet are left out)."""
    dim = len(vector)
    qv = _vector_literal(vector)
    if dim in INDEXED_DIMS:
        column: Any = literal_column(f"embeddings.embedding::vector({dim})")
        query_vec: Any = text(f"CAST(:qv AS vector({dim}))").bindparams(qv=qv)
    else:
        # Untyped on both sides: the query vector travels as text and is cast
        # in SQL (a typed column would make SQLAlchemy bind it as a Vector).
        column = literal_column("embeddings.embedding")
        query_vec = text("CAST(:qv AS vector)").bindparams(qv=qv)
    distance = column.op("<=>", return_type=Float)(query_vec)
    stamp = func.coalesce(NoteVersion.updated_at, Note.updated_at)
    born = func.coalesce(NoteVersion.created_at, Note.created_at)
    nearest = (
        select(
            literal(True).label("found"),
            Embedding.note_id,
            Embedding.kind,
            Embedding.ref,
            distance.label("d"),
            stamp.label("ts"),
            born.label("born"),
            Note.tag_index,
        )
        .join(Note, joins_note(Embedding, Embedding.note_id))
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
            *note_filters(scope, filters),
        )
        # The exact path orders by an expression no index matches, so its
        # statement (and any plan cached for it) can never be the HNSW one,
        # and the other way round.
        .order_by(distance if big else distance + 0.0)
        .limit(limit)
    )
    stmt: Any = nearest
    if cosines_of:
        stmt = union_all(nearest.subquery().select(), _cosines(scope, cosines_of, qv, model, dim))
    hits: list[Hit] = []
    near: dict[Key, float] = {}
    for r in await session.execute(stmt):
        if r[0]:
            hits.append(Hit(r[1], r[2], r[3], 1.0 - float(r[4]), r[5], r[6], key_value_terms(r[7])))
        else:
            near[(r[1], r[2], r[3])] = 1.0 - float(r[4])
    wanted = set(cosines_of)
    near = {k: v for k, v in near.items() if k in wanted}
    return sorted(hits, key=lambda h: -h.score), near


def _cosines(scope: Scope, keys: Sequence[Key], qv: str, model: str, dim: int) -> Any:
    distance = Embedding.embedding.op("<=>", return_type=Float)(
        text("CAST(:qv2 AS vector)").bindparams(qv2=qv)
    )
    return select(
        literal(False).label("found"),
        Embedding.note_id,
        Embedding.kind,
        Embedding.ref,
        distance.label("d"),
        cast(null(), Note.updated_at.type).label("ts"),
        cast(null(), Note.created_at.type).label("born"),
        cast(null(), Note.tag_index.type).label("tag_index"),
    ).where(
        Embedding.tenant_id == scope.tenant_id,
        Embedding.project_id == scope.project_id,
        Embedding.model == model,
        Embedding.dim == dim,
        Embedding.note_id == any_ids(sorted({k[0] for k in keys})),
        Embedding.kind.in_(sorted({k[1] for k in keys})),
    )


async def similarity(
    session: AsyncSession,
    scope: Scope,
    keys: Sequence[Key],
    *,
    vector: Sequence[float],
    model: str,
) -> dict[Key, float]:
    """Cosine similarity to ``vector`` of the given (note id, kind, ref) items'
    own vectors (items not embedded yet are left out)."""
    if not keys:
        return {}
    stmt = _cosines(scope, keys, _vector_literal(vector), model, len(vector))
    wanted = set(keys)
    out = {(r[1], r[2], r[3]): 1.0 - float(r[4]) for r in await session.execute(stmt)}
    return {k: v for k, v in out.items() if k in wanted}


@dataclass(frozen=True, slots=True)
class Neighbour:
    id: str
    created_at: datetime
    updated_at: datetime
    tags: frozenset[str]
    cosine: float | None  # to the question, when one was given and the note is embedded


async def neighbours(
    session: AsyncSession,
    scope: Scope,
    note_ids: Sequence[str],
    *,
    filters: Filters,
    gap: timedelta,
    vector: Sequence[float] | None = None,
    model: str = "",
) -> dict[str, tuple[Neighbour | None, Neighbour | None]]:
    """Each note's neighbours on the project's timeline: the notes just before
    and just after it (``created_at``, then id in natural order; migration
    0010), if created within ``gap`` of it, passing ``filters`` and with text;
    with ``vector``, their cosine to it."""
    if not note_ids:
        return {}
    out: dict[str, tuple[Neighbour | None, Neighbour | None]] = {}
    stmt = neighbours_query(scope, note_ids, filters=filters, gap=gap, vector=vector, model=model)
    for r in await session.execute(stmt):
        out[r[0]] = (
            Neighbour(r[1], r[2], r[3], key_value_terms(r[4]), r[5]) if r[1] is not None else None,
            Neighbour(r[6], r[7], r[8], key_value_terms(r[9]), r[10]) if r[6] is not None else None,
        )
    return out


_ANCHOR = Note.__table__.alias("anchor")


def neighbours_query(
    scope: Scope,
    note_ids: Sequence[str],
    *,
    filters: Filters,
    gap: timedelta,
    vector: Sequence[float] | None = None,
    model: str = "",
) -> Any:
    """One index probe either way per note (ix_notes_timeline), and one for
    each neighbour's vector."""
    anchor = _ANCHOR  # a Core alias: an ORM alias cost a millisecond a find to build
    natural = func.keepmem_natural_key(Note.id)
    here = tuple_(anchor.c.created_at, func.keepmem_natural_key(anchor.c.id))

    def side(before: bool) -> Any:
        order = (Note.created_at.desc(), natural.desc()) if before else (Note.created_at, natural)
        cosine: Any = literal(None, Float)
        if vector is not None:
            qv = text("CAST(:nqv AS vector)").bindparams(nqv=_vector_literal(vector))
            cosine = (
                select(1.0 - Embedding.embedding.op("<=>", return_type=Float)(qv))
                .where(
                    Embedding.tenant_id == Note.tenant_id,
                    Embedding.project_id == Note.project_id,
                    Embedding.note_id == Note.id,
                    Embedding.kind == "note",
                    Embedding.ref == 0,
                    Embedding.model == model,
                    Embedding.dim == len(vector),
                )
                .scalar_subquery()
            )
        return (
            select(
                Note.id, Note.created_at, Note.updated_at, Note.tag_index, cosine.label("cosine")
            )
            .where(
                *note_filters(scope, filters),
                Note.summary != "",  # no text (an edge's stub), no context
                # The row comparison alone bounds the scan on the anchor's side:
                # a second bound there (created_at <= the anchor's) is the one
                # the index scan starts from, and a big import stamped with one
                # time was then read note by note (250 ms at 1M, bench/search.py).
                tuple_(Note.created_at, natural) < here
                if before
                else tuple_(Note.created_at, natural) > here,
                Note.created_at >= anchor.c.created_at - gap
                if before
                else Note.created_at <= anchor.c.created_at + gap,
            )
            .order_by(*order)
            .limit(1)
            .lateral()
        )

    prev, after = side(True), side(False)
    return (
        select(anchor.c.id, prev.c.id, prev.c.created_at, prev.c.updated_at, prev.c.tag_index)
        .add_columns(prev.c.cosine, after.c.id, after.c.created_at, after.c.updated_at)
        .add_columns(after.c.tag_index, after.c.cosine)
        .select_from(anchor)
        .outerjoin(prev, true())
        .outerjoin(after, true())
        .where(
            anchor.c.tenant_id == scope.tenant_id,
            anchor.c.project_id == scope.project_id,
            anchor.c.id == any_ids(note_ids),
        )
    )
