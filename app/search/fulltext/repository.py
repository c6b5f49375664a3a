"""All SQL of find's full-text stage: reading a question against a project's
word counts, picking candidates through the GIN index, scoring them with
BM25, and the worker's recount of those word counts.

Questions are natural language: any of their (stemmed, non-stop) words may
match, and notes matching more of them rank higher. Requiring all of them,
as web search syntax does, finds almost nothing for a question.

Cost is what matters at scale. A word in more than ``fts_common_term_notes``
of a project's notes is left out of a question (it would match a large part
of a big project and tells little), at most MAX_TERMS words are kept, so a
question matches at most a few thousand notes of any project. BM25 scores
them set-based in SQL (a few microseconds each). Past SCORE_AT_ONCE matches,
MaxScore leaves out the matches that cannot reach the top: the result is
still exact BM25's (bench/search.py and tests/test_find_at_scale.py compare
it with scoring every match).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    delete,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Params, driver, json_value
from app.models import Note, Project, TermStat
from app.search.repository import Filters, Hit, filters_sql, key_value_terms
from app.tenancy import Scope

FTS_CONFIG = "english"
MAX_TERMS = 12
SCORE_AT_ONCE = 1500  # up to this many matches are scored at once; beyond, MaxScore
EXACT_TOP = 10  # past SCORE_AT_ONCE, the first this many are exact BM25's (the rest scored)
STATS_FLOOR = 50  # term_stats keeps words found in at least this many notes
N_CAP = 100_000  # counting a project's notes (before the worker's count) stops here
LENGTH_SAMPLE = 1000  # notes read for the average length before the worker's count
K1, B = 1.2, 0.75  # BM25, as keepmem_bm25 (migration 0005) computes it


@dataclass(frozen=True, slots=True)
class Terms:
    """A question read against one project's word counts."""

    groups: tuple[tuple[str, ...], ...]  # per question word its lexemes (compounds have several)
    df: dict[str, int]  # lexeme -> how many of the project's notes hold it
    common: frozenset[str]  # lexemes left out of long questions
    total: int  # notes in the project
    avgdl: float  # their average length in lexemes

    def idf(self, lexeme: str) -> float:
        # Robertson-Sparck Jones, floored as SQLite FTS5 does: a word in over
        # half the notes (a speaker's name on every turn) tells nothing.
        df = self.df.get(lexeme, 1)
        total = max(self.total, df)
        return max(math.log((total - df + 0.5) / (df + 0.5)), 1e-6)


@dataclass(slots=True)
class Stage:
    """What the stage found, and how it got there (for benchmarks and tests)."""

    hits: list[Hit]
    scored: int = 0  # matches scored by BM25
    exact: bool = True  # every match was scored (none left out by the cap)
    # BM25 of a note of average length holding each searched word once: what
    # a full match scores (ranking reads a hit's share of the question from it)
    full_match: float = 0.0


_LEXEME = re.compile(r"'((?:[^']|'')*)'")


def _lexemes(group: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.replace("''", "'") for m in _LEXEME.findall(group)))


def question_sql(query: str) -> Callable[[Params, Scope], str]:
    """The question's words and this project's counts of them, as a scalar
    subquery (a JSON array, ``terms_of`` reads it): find reads it in its
    opening statement, so the question costs no round trip of its own.

    Only the project's own notes count: its system notes (keep's schema docs,
    hidden from find) would skew the lengths and word counts of a small
    project. Counts come from the worker's last recount (``term_stats``) where there is
    one; a word missing from it is rarer than STATS_FLOOR and is counted here,
    up to that. Before the first recount everything is counted here."""

    def fragment(p: Params, scope: Scope) -> str:
        T, P = p.once("tenant", scope.tenant_id), p.once("project", scope.project_id)
        Q, CONFIG = f"{p(query)}::text", f"{p(FTS_CONFIG)}::regconfig"
        CAP, FLOOR, SAMPLE = (f"{p(v)}::int" for v in (N_CAP, STATS_FLOOR, LENGTH_SAMPLE))
        return f"""(
                WITH p AS (
                  SELECT term_stats_at, term_stats_notes, term_stats_avgdl FROM projects
                  WHERE tenant_id = {T} AND id = {P}),
                w AS (
                  SELECT DISTINCT word
                  FROM unnest(tsvector_to_array(to_tsvector({CONFIG}, {Q})))
                       AS word)
                SELECT json_build_array(
                  CAST(plainto_tsquery({CONFIG}, {Q}) AS text),
                  coalesce((SELECT term_stats_notes FROM p),
                           (SELECT count(*) FROM (SELECT 1 FROM notes
                              WHERE tenant_id = {T} AND project_id = {P}
                                AND left(id, 1) <> '.' LIMIT {CAP}) s)),
                  coalesce((SELECT term_stats_avgdl FROM p),
                           (SELECT avg(length(fts)) FROM (SELECT fts FROM notes
                              WHERE tenant_id = {T} AND project_id = {P}
                                AND left(id, 1) <> '.' LIMIT {SAMPLE}) s)),
                  array(SELECT word FROM w ORDER BY word),
                  array(SELECT coalesce(s.ndoc,
                           (SELECT count(*) FROM (SELECT 1 FROM notes
                              WHERE tenant_id = {T} AND project_id = {P}
                                AND left(id, 1) <> '.'
                                AND fts @@ to_tsquery('simple', quote_literal(w.word))
                              LIMIT (SELECT CASE WHEN term_stats_at IS NULL THEN {CAP}
                                                 ELSE {FLOOR} END FROM p)) c))
                        FROM w LEFT JOIN term_stats s
                          ON s.tenant_id = {T} AND s.project_id = {P} AND s.lexeme = w.word
                        ORDER BY w.word),
                  array(SELECT s.lexeme FROM term_stats s
                        WHERE s.tenant_id = {T} AND s.project_id = {P} AND s.common
                          AND s.lexeme IN (SELECT word FROM w)))
                )"""

    return fragment


def terms_of(value: Any) -> Terms | None:
    """The Terms of ``question_sql``'s value (None: no word to search)."""
    value = json_value(value)
    parsed, total, avgdl, words, counts, common = value or (None, 0, None, [], [], [])
    # "'word' & 'other' & 'e-mail' <-> 'e' <-> 'mail'": one group per word.
    groups = tuple(
        dict.fromkeys(_lexemes(g) for g in (parsed or "").split(" & ") if g.strip() and _lexemes(g))
    )
    if not groups:
        return None
    df = {w: int(c or 0) for w, c in zip(words or [], counts or [], strict=True)}
    total = max(int(total or 0), max(df.values(), default=0))
    return Terms(groups, df, frozenset(common or []), total, float(avgdl or 1.0))


async def read_question(session: AsyncSession, scope: Scope, query: str) -> Terms | None:
    """``question_sql`` on its own (find reads it in its opening statement)."""
    p = Params()
    sql = f"SELECT {question_sql(query)(p, scope)}"
    return terms_of(await (await driver(session)).fetchval(sql, *p.values))


def _choose(terms: Terms) -> list[tuple[str, ...]]:
    """At most MAX_TERMS of the question's words, rarest first, common ones
    left out (unless every word is common)."""
    rare = [g for g in terms.groups if not set(g) <= terms.common]
    chosen = rare or list(terms.groups)
    return sorted(chosen, key=lambda g: min(terms.df.get(x, 0) for x in g))[:MAX_TERMS]


def _char(weight: str) -> Any:
    return literal_column(f"'{weight}'::\"char\"")


def _word(group: tuple[str, ...]) -> str:
    quoted = ["'" + x.replace("'", "''") + "'" for x in group]
    return quoted[0] if len(quoted) == 1 else "(" + " <-> ".join(quoted) + ")"


async def full_text(
    session: AsyncSession,
    scope: Scope,
    terms: Terms,
    *,
    kinds: Sequence[str],
    filters: Filters,
    limit: int,
    exact: bool = False,
) -> Stage:
    """Full-text matches (notes, parts, versions), best BM25 score first.

    Notes match any of the chosen words (all of them when every word is
    common). When the counts say the matches are few, all are scored at once
    (the page is exact BM25's); beyond, MaxScore (Turtle and Flood) leaves
    out the matches that cannot reach the first EXACT_TOP (``exact`` scores
    them all: tests and benchmarks compare the two)."""
    chosen = _choose(terms)
    every = not set().union(*chosen) - terms.common and len(chosen) > 1
    scored = list(dict.fromkeys(x for g in chosen for x in g))
    full_match = sum(terms.idf(x) for x in scored)  # tf 1, length avgdl: idf each
    # The counts say how many notes can match (the fewest of the words when
    # all must match).
    counts = [min(terms.df.get(x, 0) for x in g) for g in chosen]
    may_match = min(counts) if every else sum(counts)
    args = (terms, scored, kinds, filters, limit)
    if every or exact or may_match <= SCORE_AT_ONCE:
        # Every word common: all of them must match (cheap in the GIN index).
        query = (" & " if every else " | ").join(_word(g) for g in chosen)
        hits, n = await _scored(session, scope, query, *args)
        return Stage(hits, scored=n, exact=True, full_match=full_match)
    return await _max_score(session, scope, chosen, counts, args, full_match)


async def _max_score(
    session: AsyncSession,
    scope: Scope,
    chosen: list[tuple[str, ...]],
    counts: list[int],
    args: tuple[Terms, list[str], Sequence[str], Filters, int],
    full_match: float,
) -> Stage:
    """MaxScore, set at a time. The rarest words' matches are scored first
    (about SCORE_AT_ONCE of them): the EXACT_TOP-th score among them is a
    threshold the top EXACT_TOP reach. A note that holds none of those words
    and only words whose most BM25 can give (``_bound``) sums below the
    threshold cannot reach it either: those words produce no candidates.
    The notes of the words left are scored in a second statement, without
    the ones already scored. The first EXACT_TOP hits are exact BM25's; the
    rest, up to ``limit``, the best of the matches scored (what the ranking
    blends with the vector stage's, as the cap before MaxScore gave)."""
    terms, limit = args[0], args[-1]
    safe = min(limit, EXACT_TOP)
    first, seen = 0, 0
    while first < len(chosen) and (first == 0 or seen + counts[first] <= SCORE_AT_ONCE):
        seen += counts[first]
        first += 1
    head = " | ".join(_word(g) for g in chosen[:first])
    hits, n = await _scored(session, scope, head, *args)
    threshold = hits[safe - 1].score if len(hits) >= safe else 0.0
    rest = chosen[first:]
    # A note matching none of the words below may still hold the lexemes of
    # a compound word (its parts without the phrase): they count too, and a
    # compound word is never left out.
    compound = {x for g in chosen if len(g) > 1 for x in g}
    below: set[str] = set()
    for group in sorted(rest, key=lambda g: _bound(terms, g)):
        if len(group) > 1:
            continue
        if _bound(terms, sorted(below | set(group) | compound)) >= threshold * (1 - 1e-9):
            break
        below |= set(group)
    essential = [g for g in rest if not set(g) <= below or len(g) > 1]
    if essential:
        more, m = await _scored(
            session,
            scope,
            " | ".join(_word(g) for g in essential),
            *args,
            unless=head,
        )
        hits = sorted(hits + more, key=lambda h: (-h.score, h.note_id))[:limit]
        n += m
    return Stage(hits, scored=n, exact=True, full_match=full_match)


def _bound(terms: Terms, lexemes: Sequence[str]) -> float:
    """The most BM25 can give a note for holding ``lexemes``: each word's idf
    times (k1 + 1), its limit as the word's count grows. It needs no upkeep:
    true of every note, the ones written since the last recount too."""
    return sum(terms.idf(x) for x in lexemes) * (K1 + 1)


async def _scored(
    session: AsyncSession,
    scope: Scope,
    query: str,
    terms: Terms,
    lexemes: list[str],
    kinds: Sequence[str],
    filters: Filters,
    limit: int,
    *,
    unless: str | None = None,
) -> tuple[list[Hit], int]:
    """BM25 of the notes (parts, versions) matching ``query`` (and not
    ``unless``), in one statement: the best ``limit`` and how many were scored."""
    p = Params()
    # The lexemes are already stemmed: 'simple' reads them unchanged. A scalar
    # subquery is evaluated once per query (an InitPlan), not once per row.
    tsq = f"(SELECT to_tsquery('simple', {p(query)}::text))"
    skip = "" if unless is None else f"(SELECT to_tsquery('simple', {p(unless)}::text))"
    wanted = p(lexemes)
    conds = " AND ".join(filters_sql(p, scope, filters))
    sources = []
    for kind, table, ref, stamps in _SOURCES:
        if kind not in kinds:
            continue
        # Only the question's words of the document, with their positions:
        # mark them (weight A, the rest D) and keep the marked ones.
        joined = (
            ""
            if table == "notes n"
            else (
                "JOIN notes n ON n.tenant_id = d.tenant_id AND n.project_id = d.project_id "
                "AND n.id = d.note_id"
            )
        )
        doc = "n" if table == "notes n" else "d"
        sources.append(
            f"""SELECT {"n.id" if doc == "n" else "d.note_id"} AS id, '{kind}' AS kind,
                   {ref} AS ref, {stamps}, n.tag_index, length({doc}.fts) AS len,
                   ts_filter(setweight(setweight({doc}.fts, 'D'), 'A', {wanted}::text[]),
                             '{{a}}') AS own
            FROM {table} {joined}
            WHERE {conds} AND {doc}.fts @@ {tsq}
            {f"AND NOT ({doc}.fts @@ {skip})" if skip else ""}"""
        )
    if not sources:
        return [], 0
    idf = p([terms.idf(x) for x in lexemes])
    norm = f"{K1} * (1 - {B} + {B} * c.len / {p(max(terms.avgdl, 1.0))}::float8)"
    # BM25 (k1 1.2, b 0.75) of every candidate at once: one row per (candidate,
    # question word it holds), summed. Set-based, it costs a few microseconds a
    # candidate; a function called per row (migration 0005's) cost ten times that.
    sql = f"""
        SELECT c.id, c.kind, c.ref, c.updated_at, c.created_at, c.tag_index,
               sum(q.idf * cardinality(u.positions) * {K1 + 1}
                   / (cardinality(u.positions) + {norm})) AS r,
               count(*) OVER () AS n
        FROM ({" UNION ALL ".join(sources)}) c
        JOIN LATERAL unnest(c.own) AS u(lexeme, positions, weights) ON true
        JOIN unnest({wanted}::text[], {idf}::float8[]) AS q(lexeme, idf)
          ON q.lexeme = u.lexeme
        GROUP BY c.id, c.kind, c.ref, c.updated_at, c.created_at, c.tag_index
        ORDER BY r DESC, c.id
        LIMIT {p(limit)}::int"""
    rows = await (await driver(session)).fetch(sql, *p.values)
    hits = [Hit(r[0], r[1], r[2], float(r[6]), r[3], r[4], key_value_terms(r[5])) for r in rows]
    return hits, int(rows[0][7]) if rows else 0


#: Where full text is searched: (kind, table, ref, the times a hit carries).
_SOURCES = (
    ("note", "notes n", "0", "n.updated_at, n.created_at"),
    ("part", "parts d", "d.part_num", "n.updated_at, n.created_at"),
    ("version", "note_versions d", "d.version", "d.updated_at, d.created_at"),
)


async def refresh_term_stats(session: AsyncSession, scope: Scope, *, min_notes: int) -> int:
    """Recount the document frequency of every lexeme in at least STATS_FLOOR of
    the project's notes (not its system notes), marking those in more than
    ``min_notes`` as common, and the project's size and average note length
    (all of its notes are read: a background job). Returns how many words are
    common."""
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
        " AND left(id, 1) <> '.'"
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
    total, avgdl = (
        await session.execute(
            select(func.count(), func.avg(func.length(Note.fts))).where(
                Note.tenant_id == scope.tenant_id,
                Note.project_id == scope.project_id,
                ~Note.id.startswith(".", autoescape=True),
            )
        )
    ).one()
    await session.execute(
        update(Project)
        .where(Project.tenant_id == scope.tenant_id, Project.id == scope.project_id)
        .values(
            term_stats_at=func.now(),
            term_stats_notes=total,
            term_stats_avgdl=float(avgdl) if avgdl is not None else None,
        )
    )
    return found


async def projects_needing_term_stats(
    session: AsyncSession, *, min_notes: int, max_age_seconds: float, limit: int = 100
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Projects of at least ``min_notes`` notes whose words were never
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
                      LIMIT :min) s) >= :min
            ORDER BY p.term_stats_at NULLS FIRST
            LIMIT :limit
            """
        ),
        {"age": max_age_seconds, "min": min_notes, "limit": limit},
    )
    return [(r[0], r[1]) for r in rows]
