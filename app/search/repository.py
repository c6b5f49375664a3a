"""All SQL of find: the vector stage and the full-text stage.

Both stages apply the same filters to the note a hit belongs to (tags,
time, id glob, hidden), inside the query, so a filter never starves the
results the way filtering an approximate index scan afterwards would.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Float,
    Text,
    and_,
    delete,
    func,
    literal,
    literal_column,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.auth.scope import Scope
from app.embeddings.repository import INDEXED_DIMS
from app.models import Embedding, Note, NoteVersion, Part, Project, TermStat

FTS_CONFIG = "english"
MAX_TERMS = 12
FTS_CANDIDATES = 1000  # matches BM25 scores per kind; beyond, ts_rank picks which
STATS_FLOOR = 50  # term_stats keeps words found in at least this many notes
N_CAP = 100_000  # counting a project's notes for BM25 stops here (before the worker's count)
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
    created_at: datetime
    tags: frozenset[str] = frozenset()  # the note's tag values (case-folded)


def _tag_values(index: Sequence[str] | None) -> frozenset[str]:
    """Tag values from a note's ``tag_index`` (``key=value`` terms)."""
    return frozenset(t.split("=", 1)[1] for t in index or () if "=" in t)


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
    # Plan every execution with the settings below: a generic plan cached for
    # this statement on the connection ignores them (a big project's search
    # ran as a full sort, seconds at 100k notes).
    await session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
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
        # Untyped on both sides: the query vector travels as text and is cast
        # in SQL (a typed column would make SQLAlchemy bind it as a Vector).
        column = literal_column("embeddings.embedding")
        query_vec = text("CAST(:qv AS vector)").bindparams(qv=literal)
    distance = column.op("<=>")(query_vec)
    stamp = func.coalesce(NoteVersion.updated_at, Note.updated_at)
    born = func.coalesce(NoteVersion.created_at, Note.created_at)
    stmt = (
        select(
            Embedding.note_id,
            Embedding.kind,
            Embedding.ref,
            distance.label("d"),
            stamp.label("ts"),
            born.label("born"),
            Note.tag_index,
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
        # The exact path orders by an expression no index matches, so its
        # statement (and any plan cached for it) can never be the HNSW one,
        # and the other way round: cached plans ignore later SET LOCALs.
        .order_by(distance if big else distance + 0.0)
        .limit(limit)
    )
    rows = (await session.execute(stmt)).all()
    if big:
        await session.execute(text("SET LOCAL enable_sort = on"))
    hits = [
        Hit(r.note_id, r.kind, r.ref, 1.0 - float(r.d), r.ts, r.born, _tag_values(r.tag_index))
        for r in rows
    ]
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
    """Full-text matches (notes, parts, versions), best BM25 score first.

    Questions are natural language: any of their (stemmed, non-stop) words
    may match, and notes matching more of them rank higher. Requiring all of
    them, as web search syntax does, finds almost nothing for a question.
    In a big project the question's common words are left out (see
    ``_question_tsquery``).
    """
    # Plan with this query's values: a generic plan cached on the connection
    # would use the GIN index (or not) for every project alike.
    await session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
    question = await _question_tsquery(session, scope, query)
    if question is None:
        return []
    tsq_text, lexemes = question
    idfs, avgdl = await _term_weights(session, scope, lexemes)
    terms = literal(lexemes, ARRAY(Text))
    weights = literal(idfs, ARRAY(Float))
    # A scalar subquery: Postgres evaluates it once per query (an InitPlan).
    # Written inline, a generic plan re-parses the question for every row.
    # The lexemes are already stemmed: 'simple' reads them unchanged.
    tsq = select(func.to_tsquery("simple", tsq_text)).scalar_subquery()

    def ranked(entity: Any, columns: list[Any], joins: bool) -> Any:
        """BM25 over at most FTS_CANDIDATES matches, picked by the cheap
        ``ts_rank`` when more match (only in big projects)."""
        matches = select(*columns, entity.fts.label("doc"))
        if joins:
            matches = matches.join(Note, _joins_note(entity, entity.note_id))
        cand = (
            matches.where(*_note_filters(scope, filters), entity.fts.op("@@")(tsq))
            .order_by(func.ts_rank(entity.fts, tsq).desc())
            .limit(FTS_CANDIDATES)
            .subquery()
        )
        rank = func.keepmem_bm25(cand.c.doc, terms, weights, avgdl)
        keep = [c for c in cand.c if c.name != "doc"]
        return select(*keep, rank.label("r")).order_by(rank.desc()).limit(limit)

    hits: list[Hit] = []
    if "note" in kinds:
        stmt = ranked(Note, [Note.id, Note.updated_at, Note.created_at, Note.tag_index], False)
        rows = await session.execute(stmt)
        hits += [Hit(r[0], "note", 0, float(r[4]), r[1], r[2], _tag_values(r[3])) for r in rows]
    for kind, entity, ref in (
        ("part", Part, Part.part_num),
        ("version", NoteVersion, NoteVersion.version),
    ):
        if kind in kinds:
            updated = Note.updated_at if kind == "part" else NoteVersion.updated_at
            created = Note.created_at if kind == "part" else NoteVersion.created_at
            columns = [entity.note_id, updated, created, ref, Note.tag_index]
            rows = await session.execute(ranked(entity, columns, joins=True))
            hits += [
                Hit(r[0], kind, r[3], float(r[5]), r[1], r[2], _tag_values(r[4])) for r in rows
            ]
    return sorted(hits, key=lambda h: -h.score)[:limit]


_LEXEME = re.compile(r"'((?:[^']|'')*)'")


async def _question_tsquery(
    session: AsyncSession, scope: Scope, query: str
) -> tuple[str, list[str]] | None:
    """The tsquery text of a question, its words (stemmed, stop words gone)
    OR'ed, and the lexemes BM25 scores.

    Words found in more than ``fts_common_term_notes`` of the project's notes
    (``term_stats``, counted by the worker) are dropped: in a big project they
    would match, and the stage would rank, a large share of all notes, while
    telling little about which ones answer. If every word is common, all of
    them must match instead (AND, which the GIN index answers cheaply). At
    most MAX_TERMS words are kept.
    """
    parsed = await session.scalar(select(func.cast(func.plainto_tsquery(FTS_CONFIG, query), Text)))
    # "'word' & 'other' & 'e-mail' <-> 'e' <-> 'mail'": one group per word.
    groups = list(dict.fromkeys(g.strip() for g in (parsed or "").split(" & ") if g.strip()))
    if not groups:
        return None
    lexemes = {m.replace("''", "'") for g in groups for m in _LEXEME.findall(g)}
    common = set(
        (
            await session.execute(
                select(TermStat.lexeme).where(
                    TermStat.tenant_id == scope.tenant_id,
                    TermStat.project_id == scope.project_id,
                    TermStat.lexeme.in_(sorted(lexemes)),
                    TermStat.common,
                )
            )
        ).scalars()
    )
    rare = [g for g in groups if not {m.replace("''", "'") for m in _LEXEME.findall(g)} <= common]
    chosen = (rare or groups)[:MAX_TERMS]
    scored = list(dict.fromkeys(m.replace("''", "'") for g in chosen for m in _LEXEME.findall(g)))
    if rare:
        return " | ".join(chosen), scored
    return " & ".join(chosen), scored


async def _term_weights(
    session: AsyncSession, scope: Scope, lexemes: Sequence[str]
) -> tuple[list[float], float]:
    """BM25's inverse document frequencies of the lexemes in this project, and
    its average document length (from a sample), in one round trip. Sizes and
    frequencies come from the worker's last count (term_stats) where it has
    one; the rest are counted, up to STATS_FLOOR once a count exists (a word
    missing from it was rarer than that)."""
    row = (
        await session.execute(
            text(
                """
                SELECT
                  coalesce(
                    (SELECT term_stats_notes FROM projects WHERE tenant_id = :t AND id = :p),
                    (SELECT count(*) FROM (SELECT 1 FROM notes
                       WHERE tenant_id = :t AND project_id = :p LIMIT :cap) s)),
                  (SELECT avg(length(fts)) FROM (SELECT fts FROM notes
                     WHERE tenant_id = :t AND project_id = :p LIMIT 1000) s),
                  array(SELECT coalesce(
                           (SELECT ndoc FROM term_stats
                            WHERE tenant_id = :t AND project_id = :p AND lexeme = l.lexeme),
                           (SELECT count(*) FROM (SELECT 1 FROM notes
                              WHERE tenant_id = :t AND project_id = :p
                                AND fts @@ to_tsquery('simple', quote_literal(l.lexeme))
                              LIMIT (SELECT CASE WHEN term_stats_at IS NULL THEN :cap
                                                 ELSE :floor END
                                     FROM projects WHERE tenant_id = :t AND id = :p)) s))
                        FROM unnest(CAST(:lexemes AS text[])) WITH ORDINALITY AS l(lexeme, i)
                        ORDER BY l.i)
                """
            ),
            {
                "t": scope.tenant_id,
                "p": scope.project_id,
                "cap": N_CAP,
                "floor": STATS_FLOOR,
                "lexemes": list(lexemes),
            },
        )
    ).one()
    total, avgdl, dfs = int(row[0] or 0), float(row[1] or 1.0), list(row[2] or [])
    total = max(total, max(dfs, default=0))
    # Robertson-Sparck Jones, floored as SQLite FTS5 does: a word in over half
    # the notes (a speaker name on every turn) tells nothing.
    idfs = [max(math.log((total - df + 0.5) / (df + 0.5)), 1e-6) for df in dfs]
    return idfs, avgdl


async def refresh_term_stats(session: AsyncSession, scope: Scope, *, min_notes: int) -> int:
    """Recount the document frequency of every lexeme in at least STATS_FLOOR of
    the project's notes, marking those in more than ``min_notes`` as common
    (all of its notes are read: a background job). Returns how many are common."""
    await session.execute(
        delete(TermStat).where(
            TermStat.tenant_id == scope.tenant_id, TermStat.project_id == scope.project_id
        )
    )
    # ts_stat runs this query with the caller's rights, under row-level
    # security; the ids are UUIDs, so formatting them in is safe.
    inner = (
        "SELECT fts FROM notes WHERE tenant_id = "
        f"'{uuid.UUID(str(scope.tenant_id))}' AND project_id = '{uuid.UUID(str(scope.project_id))}'"
    )
    await session.execute(
        text(
            "INSERT INTO term_stats (tenant_id, project_id, lexeme, ndoc, common) "
            "SELECT :t, :p, word, ndoc, ndoc > :min FROM ts_stat(:inner) "
            "WHERE ndoc >= :floor OR ndoc > :min"
        ),
        {
            "t": scope.tenant_id,
            "p": scope.project_id,
            "inner": inner,
            "min": min_notes,
            "floor": STATS_FLOOR,
        },
    )
    found = int(
        await session.scalar(
            select(func.count()).where(
                TermStat.tenant_id == scope.tenant_id,
                TermStat.project_id == scope.project_id,
                TermStat.common,
            )
        )
        or 0
    )
    total = await session.scalar(
        select(func.count()).where(
            Note.tenant_id == scope.tenant_id, Note.project_id == scope.project_id
        )
    )
    await session.execute(
        update(Project)
        .where(Project.tenant_id == scope.tenant_id, Project.id == scope.project_id)
        .values(term_stats_at=func.now(), term_stats_notes=total)
    )
    return found


async def projects_needing_term_stats(
    session: AsyncSession, *, min_notes: int, max_age_seconds: float, limit: int = 100
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Projects with more than ``min_notes`` notes whose common words were never
    counted, or not for ``max_age_seconds``, and no count already queued (system)."""
    rows = await session.execute(
        text(
            """
            SELECT p.tenant_id, p.id FROM projects p
            WHERE (p.term_stats_at IS NULL
                   OR p.term_stats_at < now() - make_interval(secs => :age))
              AND NOT EXISTS (
                  SELECT 1 FROM jobs j
                  WHERE j.tenant_id = p.tenant_id AND j.project_id = p.id
                    AND j.kind = 'term_stats'
                    AND j.status IN ('pending', 'dispatched', 'running'))
              AND (SELECT count(*) FROM (
                      SELECT 1 FROM notes n
                      WHERE n.tenant_id = p.tenant_id AND n.project_id = p.id
                      LIMIT :min + 1) s) > :min
            ORDER BY p.term_stats_at NULLS FIRST
            LIMIT :limit
            """
        ),
        {"age": max_age_seconds, "min": min_notes, "limit": limit},
    )
    return [(r[0], r[1]) for r in rows]


async def similarity(
    session: AsyncSession,
    scope: Scope,
    keys: Sequence[tuple[str, str, int]],
    *,
    vector: Sequence[float],
    model: str,
) -> dict[tuple[str, str, int], float]:
    """Cosine similarity to ``vector`` of the given (note id, kind, ref) items'
    own vectors (items not embedded yet are left out)."""
    if not keys:
        return {}
    literal = "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"
    distance = Embedding.embedding.op("<=>", return_type=Float)(
        text("CAST(:qv AS vector)").bindparams(qv=literal)
    )
    wanted = set(keys)
    rows = await session.execute(
        select(Embedding.note_id, Embedding.kind, Embedding.ref, distance).where(
            Embedding.tenant_id == scope.tenant_id,
            Embedding.project_id == scope.project_id,
            Embedding.model == model,
            Embedding.dim == len(vector),
            Embedding.note_id.in_(sorted({k[0] for k in keys})),
            Embedding.kind.in_(sorted({k[1] for k in keys})),
        )
    )
    out = {(r[0], r[1], r[2]): 1.0 - float(r[3]) for r in rows}
    return {k: v for k, v in out.items() if k in wanted}


@dataclass(frozen=True, slots=True)
class Neighbour:
    id: str
    created_at: datetime
    updated_at: datetime
    tags: frozenset[str]


async def neighbours(
    session: AsyncSession,
    scope: Scope,
    note_ids: Sequence[str],
    *,
    filters: Filters,
    gap: timedelta,
) -> dict[str, tuple[Neighbour | None, Neighbour | None]]:
    """Each note's neighbours on the project's timeline: the notes just before
    and just after it (``created_at``, then id in natural order; migration
    0010), if created within ``gap`` of it, passing ``filters`` and with text."""
    if not note_ids:
        return {}
    out: dict[str, tuple[Neighbour | None, Neighbour | None]] = {}
    stmt = neighbours_query(scope, note_ids, filters=filters, gap=gap)
    for r in await session.execute(stmt):
        out[r[0]] = (
            Neighbour(r[1], r[2], r[3], _tag_values(r[4])) if r[1] is not None else None,
            Neighbour(r[5], r[6], r[7], _tag_values(r[8])) if r[5] is not None else None,
        )
    return out


def neighbours_query(
    scope: Scope, note_ids: Sequence[str], *, filters: Filters, gap: timedelta
) -> Any:
    """One index probe either way per note (ix_notes_timeline)."""
    anchor = aliased(Note, name="anchor")
    natural = func.keepmem_natural_key(Note.id)
    here = tuple_(anchor.created_at, func.keepmem_natural_key(anchor.id))

    def side(before: bool) -> Any:
        order = (Note.created_at.desc(), natural.desc()) if before else (Note.created_at, natural)
        return (
            select(Note.id, Note.created_at, Note.updated_at, Note.tag_index)
            .where(
                *_note_filters(scope, filters),
                Note.summary != "",  # no text (an edge's stub), no context
                tuple_(Note.created_at, natural) < here
                if before
                else tuple_(Note.created_at, natural) > here,
                Note.created_at.between(anchor.created_at - gap, anchor.created_at)
                if before
                else Note.created_at.between(anchor.created_at, anchor.created_at + gap),
            )
            .order_by(*order)
            .limit(1)
            .lateral()
        )

    prev, after = side(True), side(False)
    return (
        select(anchor.id, prev.c.id, prev.c.created_at, prev.c.updated_at, prev.c.tag_index)
        .add_columns(after.c.id, after.c.created_at, after.c.updated_at, after.c.tag_index)
        .select_from(anchor)
        .outerjoin(prev, true())
        .outerjoin(after, true())
        .where(
            anchor.tenant_id == scope.tenant_id,
            anchor.project_id == scope.project_id,
            anchor.id.in_(list(note_ids)),
        )
    )


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
