"""SQL of find's vector stage and of what follows both stages: the
opening statement (counts and planner settings), cosines of candidates,
timeline neighbours, the page's rows. The full-text stage's SQL is
``app.search.fulltext``'s.

Both stages apply the same filters to the note a hit belongs to (tags,
time, id glob, hidden), inside the query, so a filter never starves the
results the way filtering an approximate index scan afterwards would.

find's statements are written out and run on the session's asyncpg
connection (``app.db.driver``), in the session's transaction: through
SQLAlchemy each cost ten times what PostgreSQL spends on it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Params, driver, json_value
from app.kit.timeutil import keep_ts
from app.notes.repository.vectors import INDEXED_DIMS
from app.search.ranking import Key
from app.tenancy import Scope

#: A scalar subquery another repository writes for find's opening statement
#: (the project's settings, its pending work, the question's word counts).
Fragment = Callable[[Params, Scope], str]

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


def filters_sql(p: Params, scope: Scope, f: Filters, n: str = "n") -> list[str]:
    """The conditions on the note ``n`` every stage applies (its tenant and
    project included), as SQL with ``p``'s parameters."""
    conds = [
        f"{n}.tenant_id = {p.once('tenant', scope.tenant_id)}",
        f"{n}.project_id = {p.once('project', scope.project_id)}",
    ]
    if f.tag_terms:
        conds.append(f"{n}.tag_index @> {p(list(f.tag_terms))}::text[]")
    if f.since is not None:
        conds.append(f"{n}.updated_at >= {p(f.since)}")
    if f.until is not None:
        conds.append(f"{n}.updated_at < {p(f.until)}")
    if f.id_regex:
        conds.append(f"{n}.id ~ {p(f.id_regex)}::text")
    if not f.include_hidden:
        conds.append(f"left({n}.id, 1) <> '.'")
    if f.exclude_ids:
        conds.append(f"NOT ({n}.id = ANY({p(list(f.exclude_ids))}::text[]))")
    if f.as_of is not None:
        conds.append(f"{n}.created_at <= {p(f.as_of)}")
    if not f.include_superseded:
        current = f"NOT ({n}.tag_index @> ARRAY['superseded_by'])"
        if f.as_of is not None:
            then = p(keep_ts(f.as_of))
            current = f"({current} OR ({n}.tags ->> 'superseded_at') > {then}::text)"
        conds.append(current)
    return conds


@dataclass(frozen=True, slots=True)
class Opening:
    vectors: int  # the project's vectors of the model, counted up to EXACT_BELOW
    extra: tuple[Any, ...]  # the values of the ``also`` fragments, in order

    @property
    def big(self) -> bool:
        return self.vectors >= EXACT_BELOW


async def open_find(
    session: AsyncSession,
    scope: Scope,
    *,
    model: str,
    candidates: int,
    also: Sequence[Fragment] = (),
    known_big: bool = False,
) -> Opening:
    """find's first statement: how many vectors the project has (which decides
    the vector stage's path), the values of ``also`` (scalar subqueries other
    repositories write: the project's settings, its pending work, the
    question's words), and the planner settings of the rest of the
    transaction, in one round trip.

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
    p = Params()  # (a parameter no part of the statement names could not be typed)
    if known_big:  # counted a moment ago: big projects do not shrink that fast
        count = f"{p(EXACT_BELOW)}::int"
    elif scope.tag_terms:
        # A tag-scoped credential counts the notes it sees: its policy on
        # notes is one index test, where each vector would cost a probe of
        # its note (migration 0020; 5 ms at 4,000 notes, bench/access.py).
        count = (
            "(SELECT count(*) FROM (SELECT 1 FROM notes "
            f"WHERE tenant_id = {p.once('tenant', scope.tenant_id)} "
            f"AND project_id = {p.once('project', scope.project_id)} AND left(id, 1) <> '.' "
            f"LIMIT {p(EXACT_BELOW)}::int) c)"
        )
    else:
        count = (
            "(SELECT count(*) FROM (SELECT 1 FROM embeddings "
            f"WHERE tenant_id = {p.once('tenant', scope.tenant_id)} "
            f"AND project_id = {p.once('project', scope.project_id)} AND model = {p(model)}::text "
            f"LIMIT {p(EXACT_BELOW)}::int) c)"
        )
    settings = {
        "plan_cache_mode": "force_custom_plan",
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(max(40, min(candidates, 1000))),
        # No statement of find has a choice between sorting and not but the
        # two that must not sort: the HNSW path of a big project and the
        # timeline probe (``neighbours_sql``), which estimated on a few rows
        # would rather read notes by time and sort the ties (an import stamped
        # with one time is all ties: 150 ms a find at 1M). The exact path of a
        # small project orders by an expression no index has, so it sorts
        # whatever this says, as do the text stage's rankings.
        "enable_sort": "off",
        "enable_incremental_sort": "off",
    }
    columns = [count, *(fragment(p, scope) for fragment in also)]
    columns += [f"set_config('{name}', '{value}', true)" for name, value in settings.items()]
    row = await (await driver(session)).fetchrow(f"SELECT {', '.join(columns)}", *p.values)
    return Opening(int(row[0] or 0), tuple(row[1 : 1 + len(also)]))


def _vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form; one find sends its query vector in up to three
    statements, and formatting 384 floats costs more than half a millisecond."""
    return _literal(tuple(vector))


@functools.lru_cache(maxsize=256)
def _literal(vector: tuple[float, ...]) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def _query_vector(p: Params, vector: Sequence[float]) -> str:
    """The question's vector as a parameter (its text form, cast), typed to
    the dimension the HNSW indexes are built for when it is one of them."""
    qv = p.once("qv", _vector_literal(vector))
    return (
        f"{qv}::text::vector({len(vector)})"
        if len(vector) in INDEXED_DIMS
        else f"{qv}::text::vector"
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
    cosines_of: Sequence[Key] = (),
) -> tuple[list[Hit], dict[Key, float]]:
    """Nearest vectors of this project and model, filters applied in the scan
    (planner settings: ``open_find``), best first; and, in the same round trip,
    the cosine of the ``cosines_of`` items' own vectors (items not embedded
    yet are left out)."""
    p = Params()
    dim = len(vector)
    qv = _query_vector(p, vector)
    column = f"e.embedding::vector({dim})" if dim in INDEXED_DIMS else "e.embedding"
    # The exact path orders by an expression no index matches, so its
    # statement (and any plan cached for it) can never be the HNSW one, and
    # the other way round.
    order = f"{column} <=> {qv}" if big else f"({column} <=> {qv}) + 0.0"
    nearest = f"""
        SELECT true AS found, e.note_id, e.kind, e.ref, {column} <=> {qv} AS d,
               coalesce(v.updated_at, n.updated_at) AS ts,
               coalesce(v.created_at, n.created_at) AS born, n.tag_index
        FROM embeddings e
        JOIN notes n ON n.tenant_id = e.tenant_id AND n.project_id = e.project_id
                    AND n.id = e.note_id
        LEFT JOIN note_versions v ON e.kind = 'version' AND v.tenant_id = e.tenant_id
                    AND v.project_id = e.project_id AND v.note_id = e.note_id
                    AND v.version = e.ref
        WHERE e.tenant_id = {p.once("tenant", scope.tenant_id)}
          AND e.project_id = {p.once("project", scope.project_id)}
          AND e.model = {p.once("model", model)}::text AND e.dim = {p(dim)}::int
          AND e.kind = ANY({p(list(kinds))}::text[])
          AND {" AND ".join(filters_sql(p, scope, filters))}
        ORDER BY {order}
        LIMIT {p(limit)}::int"""
    sql = nearest
    if cosines_of:
        cosines = _cosines_sql(p, scope, cosines_of, model, vector)
        sql = f"SELECT * FROM ({nearest}) nearest UNION ALL {cosines}"
    hits: list[Hit] = []
    near: dict[Key, float] = {}
    for r in await (await driver(session)).fetch(sql, *p.values):
        if r[0]:
            hits.append(Hit(r[1], r[2], r[3], 1.0 - float(r[4]), r[5], r[6], key_value_terms(r[7])))
        else:
            near[(r[1], r[2], r[3])] = 1.0 - float(r[4])
    wanted = set(cosines_of)
    near = {k: v for k, v in near.items() if k in wanted}
    return sorted(hits, key=lambda h: -h.score), near


def _cosines_sql(
    p: Params, scope: Scope, keys: Sequence[Key], model: str, vector: Sequence[float]
) -> str:
    qv, dim = p.once("qv", _vector_literal(vector)), len(vector)  # semantic's, if it named it
    return f"""
        SELECT false, e.note_id, e.kind, e.ref, e.embedding <=> {qv}::text::vector,
               NULL::timestamptz, NULL::timestamptz, NULL::text[]
        FROM embeddings e
        WHERE e.tenant_id = {p.once("tenant", scope.tenant_id)}
          AND e.project_id = {p.once("project", scope.project_id)}
          AND e.model = {p.once("model", model)}::text AND e.dim = {p.once("dim", dim)}::int
          AND e.note_id = ANY({p(sorted({k[0] for k in keys}))}::text[])
          AND e.kind = ANY({p(sorted({k[1] for k in keys}))}::text[])"""


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
    p = Params()
    sql = _cosines_sql(p, scope, keys, model, vector)
    wanted = set(keys)
    rows = await (await driver(session)).fetch(sql, *p.values)
    out = {(r[1], r[2], r[3]): 1.0 - float(r[4]) for r in rows}
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
    sql, values = neighbours_sql(
        scope, note_ids, filters=filters, gap=gap, vector=vector, model=model
    )
    for r in await (await driver(session)).fetch(sql, *values):
        out[r[0]] = (
            Neighbour(r[1], r[2], r[3], key_value_terms(r[4]), r[5]) if r[1] is not None else None,
            Neighbour(r[6], r[7], r[8], key_value_terms(r[9]), r[10]) if r[6] is not None else None,
        )
    return out


def neighbours_sql(
    scope: Scope,
    note_ids: Sequence[str],
    *,
    filters: Filters,
    gap: timedelta,
    vector: Sequence[float] | None = None,
    model: str = "",
) -> tuple[str, list[Any]]:
    """One index probe either way per note (ix_notes_timeline), and one for
    each neighbour's vector: the statement and its parameters."""
    p = Params()
    gap_param = p(gap)
    conds = " AND ".join(filters_sql(p, scope, filters))
    cosine = "NULL::float8"
    if vector is not None:
        qv = p(_vector_literal(vector))
        cosine = f"""(SELECT 1.0 - (e.embedding <=> {qv}::text::vector) FROM embeddings e
            WHERE e.tenant_id = n.tenant_id AND e.project_id = n.project_id
              AND e.note_id = n.id AND e.kind = 'note' AND e.ref = 0
              AND e.model = {p(model)}::text AND e.dim = {p(len(vector))}::int)"""

    def side(before: bool) -> str:
        # The row comparison alone bounds the scan on the anchor's side: a
        # second bound there (created_at <= the anchor's) is the one the
        # index scan starts from, and a big import stamped with one time was
        # then read note by note (250 ms at 1M, bench/search.py).
        compare, bound, order = (
            ("<", f"n.created_at >= a.created_at - {gap_param}::interval", "DESC")
            if before
            else (">", f"n.created_at <= a.created_at + {gap_param}::interval", "")
        )
        return f"""LATERAL (
            SELECT n.id, n.created_at, n.updated_at, n.tag_index, {cosine} AS cosine
            FROM notes n
            WHERE {conds}
              AND n.summary <> ''
              AND (n.created_at, keepmem_natural_key(n.id))
                  {compare} (a.created_at, keepmem_natural_key(a.id))
              AND {bound}
            ORDER BY n.created_at {order}, keepmem_natural_key(n.id) {order}
            LIMIT 1)"""

    sql = f"""
        SELECT a.id, b.id, b.created_at, b.updated_at, b.tag_index, b.cosine,
               f.id, f.created_at, f.updated_at, f.tag_index, f.cosine
        FROM notes a
        LEFT JOIN {side(True)} b ON true
        LEFT JOIN {side(False)} f ON true
        WHERE a.tenant_id = {p.once("tenant", scope.tenant_id)}
          AND a.project_id = {p.once("project", scope.project_id)}
          AND a.id = ANY({p(list(note_ids))}::text[])"""
    return sql, p.values


@dataclass(frozen=True, slots=True)
class PageNote:
    """What a page shows of a note (``app.notes.views.note_view`` reads it)."""

    id: str
    summary: str
    tags: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime


async def page_notes(
    session: AsyncSession, scope: Scope, note_ids: Sequence[str]
) -> dict[str, PageNote]:
    """The notes a page shows, in one statement."""
    if not note_ids:
        return {}
    rows = await (await driver(session)).fetch(
        "SELECT id, summary, tags, created_at, updated_at, accessed_at FROM notes "
        "WHERE tenant_id = $1 AND project_id = $2 AND id = ANY($3::text[])",
        scope.tenant_id,
        scope.project_id,
        list(note_ids),
    )
    return {r[0]: PageNote(r[0], r[1], json_value(r[2]), r[3], r[4], r[5]) for r in rows}
