"""find: hybrid retrieval (KEEP_PROTOCOL §6.7, with our own scoring).

The stages gather candidates: vector similarity (pgvector, exact in small
projects, HNSW in big ones) and BM25 full text (tsvector). Every candidate
then gets the score of the stage that did not find it too (its cosine), the
best ones' timeline neighbours join as context, and ``ranking`` orders them:
relevance from both scores, context, dates the question names, and a
bounded recency bonus (half-life 30 days unless the project or the query
says otherwise; 0 turns it off). Parts are found as ``ID@P{N}``; versions,
when asked, as ``ID@V{N}``. A note is findable by full text as soon as its
put returns and by meaning once embedded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.caches import LRU
from app.errors import BadRequest, NotEmbeddedYet, NoteNotFound
from app.graph import service as graph
from app.grounding import citations
from app.jobs import repository as jobs
from app.kit import tags as tagrules
from app.kit.ids import InvalidId, glob_regex, is_system_id, normalize_id
from app.kit.timeutil import parse_timestamp, parse_when
from app.logs import log_failure
from app.notes import repository as notes
from app.notes.repository import vectors
from app.notes.views import ItemView, note_view, part_view, version_view
from app.providers.embedding.base import Embedder, QueryCache
from app.providers.errors import ProviderError
from app.request_vars import timed
from app.search import ranking, spread
from app.search import repository as repo
from app.search.fulltext import repository as fulltext
from app.search.ranking import Candidate, Key
from app.tenancy import Scope
from app.tenants import repository as projects

DEFAULT_HALF_LIFE_DAYS = 30.0
BIG_FOR = 300.0  # seconds a project counted as big is taken as big without counting

log = logging.getLogger("keepmem.search")

# (tenant, project, model) -> when it was last counted as big (this process).
_big_since: LRU[tuple[uuid.UUID, uuid.UUID, str], float] = LRU(10_000)


@dataclass(frozen=True, slots=True)
class FindInput:
    query: str | None = None
    similar_to: str | None = None
    tags: Mapping[str, Any] | None = None
    since: str | None = None
    until: str | None = None
    scope: str | None = None
    include_hidden: bool = False
    include_self: bool = False
    include_parts: bool = True
    include_versions: bool = False
    limit: int = 10
    bias: Mapping[str, float] = field(default_factory=dict)
    stages: str = "hybrid"  # hybrid | vector | text
    half_life_days: float | None = None  # overrides the project's setting
    deep: bool = False  # follow edges from the top results (deep_groups)
    deep_follow_depth: int = 10
    explain: bool = False  # record how each result's score came about
    include_superseded: bool = False  # notes tagged superseded_by (replaced memories)
    as_of: str | None = None  # ISO-8601: what was believed then
    cite: bool = False  # a citation (not stored) with each result
    per_document: int | None = None  # at most this many results of one note (with its parts)


@dataclass(slots=True)
class SearchResult:
    items: list[tuple[ItemView, float]]
    pending_embedding: int
    mode: str
    deep_groups: list[tuple[str, list[tuple[ItemView, float]]]] = field(default_factory=list)
    # With explain: one per item, in order (the bias applied last).
    explained: list[tuple[ranking.Explained, float]] | None = None
    # Set when the find answered with less than it was asked for (the
    # embedder down: a hybrid find from its full-text stage alone).
    warning: str | None = None
    # With cite: one per item, in order (None where the text is not kept).
    citations: list[citations.CitationView | None] | None = None
    citation_warning: str | None = None


DEEP_FROM = 10  # top results whose edges deep find follows
DEEP_PER_GROUP = 10


def _filters(data: FindInput, exclude: list[str]) -> repo.Filters:
    try:
        terms = tagrules.filter_terms(data.tags)
    except tagrules.InvalidTags as exc:
        raise BadRequest(f"invalid tags: {exc}") from exc
    return repo.Filters(
        tag_terms=terms,
        since=parse_when(data.since) if data.since else None,
        until=parse_when(data.until) if data.until else None,
        id_regex=glob_regex(data.scope) if data.scope else None,
        include_hidden=data.include_hidden,
        exclude_ids=exclude,
        include_superseded=data.include_superseded,
        as_of=_as_of(data.as_of),
    )


def _as_of(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        return parse_timestamp(raw)
    except ValueError as exc:
        raise BadRequest(f"invalid as_of {raw[:80]!r}: use an ISO-8601 time ({exc})") from exc


def _gather(found: dict[Key, Candidate], hits: list[repo.Hit], stage: str) -> None:
    """Record each hit's score for ``stage`` ("text" or "cosine")."""
    for hit in hits:
        key = (hit.note_id, hit.kind, hit.ref)
        c = found.get(key)
        if c is None:
            c = found[key] = Candidate(key, hit.created_at, hit.updated_at, tags=hit.tags)
        if getattr(c, stage) is None:
            setattr(c, stage, hit.score)


async def _timeline(
    session: AsyncSession, scope: Scope, run: _Run, model: str
) -> dict[str, tuple[str | None, str | None]]:
    """The timeline neighbours of the best candidate notes, which join the
    candidates (a neighbour is the context of a hit even if no stage found it)."""
    found, filters, vector = run.found, run.filters, run.vector
    base = ranking.relevance(found.values(), run.stages, full_match=run.question.full_match)
    best = sorted((k for k in base if k[1] == "note"), key=lambda k: -base[k])
    around = await repo.neighbours(
        session,
        scope,
        [k[0] for k in best[: ranking.CONTEXT_FROM]],
        filters=filters,
        gap=ranking.EPISODE_GAP,
        vector=vector,
        model=model,
    )
    out: dict[str, tuple[str | None, str | None]] = {}
    for note_id, pair in around.items():
        for n in pair:
            if n is not None:
                key = (n.id, "note", 0)
                c = found.setdefault(
                    key,
                    Candidate(key, n.created_at, n.updated_at, tags=n.tags, context_only=True),
                )
                if c.cosine is None and vector is not None:
                    c.cosine = n.cosine or 0.0  # 0: not embedded yet
                    c.embedded = n.cosine is not None
        out[note_id] = (pair[0].id if pair[0] else None, pair[1].id if pair[1] else None)
    return out


async def find(
    session: AsyncSession,
    scope: Scope,
    *,
    embedder: Embedder,
    cache: QueryCache,
    data: FindInput,
) -> SearchResult:
    """Notes (and parts, versions) for a query or like a given note, best first."""
    _check(data)
    opened = await _open(session, scope, data, model=embedder.model_id)
    if data.similar_to:
        run = await _similar(session, scope, data, opened, raw=data.similar_to)
    else:
        run = await _stages(session, scope, data, opened, embedder=embedder, cache=cache)
    neighbours: dict[str, tuple[str | None, str | None]] = {}
    if not data.similar_to:
        with timed("context"):
            neighbours = await _timeline(session, scope, run, opened.model)
    explained: dict[Key, ranking.Explained] | None = {} if data.explain else None
    passages = await spread.passages_found(session, scope, run.found)
    top = _rank(data, run, neighbours, _half_life(data, opened.settings), explained, passages)
    with timed("views"):
        keyed = await _views(session, scope, top)
    items = [(view, score) for _, view, score in keyed]
    why = _why(data, keyed, explained)
    cited: list[citations.CitationView | None] | None = None
    cite_warning = None
    if data.cite:
        with timed("cite"):
            hits = [(k[0], k[1], k[2], v.span) for k, v, _ in keyed]
            cited, cite_warning = await citations.for_hits(session, scope, hits)
    groups = []
    if data.deep:
        anchor_ids = [] if data.include_self or not data.similar_to else [run.anchor]
        with timed("deep"):
            groups = await _deep(session, scope, data, items, run.vector, opened.model, anchor_ids)
    return SearchResult(
        items=items,
        pending_embedding=opened.pending,
        mode=run.mode,
        deep_groups=groups,
        explained=why,
        warning=run.warning,
        citations=cited,
        citation_warning=cite_warning,
    )


# -- find's steps, in order -----------------------------------------------------


def _check(data: FindInput) -> None:
    """Refuse what find does not take (before any statement runs)."""
    if bool(data.query and data.query.strip()) == bool(data.similar_to):
        raise BadRequest("find needs exactly one of query and similar_to")
    if not 1 <= data.limit <= 100:
        raise BadRequest("limit must be between 1 and 100")
    if any(w < 0 for w in data.bias.values()):
        raise BadRequest("bias weights must be >= 0")
    if data.stages not in ("hybrid", "vector", "text"):
        raise BadRequest("stages must be hybrid, vector or text")
    if data.half_life_days is not None and data.half_life_days < 0:
        raise BadRequest("half_life_days must be >= 0 (0 turns decay off)")
    if not 1 <= data.deep_follow_depth <= 100:
        raise BadRequest("deep_follow_depth must be between 1 and 100")
    if data.per_document is not None and not 1 <= data.per_document <= 100:
        raise BadRequest("per_document must be between 1 and 100")


@dataclass(frozen=True, slots=True)
class _Opened:
    """What the find works with once opened: the kinds and filters asked for,
    how many candidates a stage gathers, and the opening statement's answers."""

    model: str
    kinds: list[str]
    wide: int  # candidates a stage gathers
    filters: repo.Filters
    opening: repo.Opening
    settings: dict[str, Any]  # the project's
    pending: int  # the project's open embed and reindex jobs
    terms: fulltext.Terms | None = None  # the question read for the full-text stage


async def _open(session: AsyncSession, scope: Scope, data: FindInput, *, model: str) -> _Opened:
    """The scope's kinds and filters, then one statement: whether there are
    vectors and which path the vector stage takes, the project's settings, its
    pending work, the planner's settings."""
    kinds = ["note"] + (["part"] if data.include_parts else [])
    kinds += ["version"] if data.include_versions else []
    wide = max(data.limit * 10, 200)
    filters = _filters(data, [])
    size_key = (scope.tenant_id, scope.project_id, model)
    now = time.monotonic()
    counted = _big_since.get(size_key)
    known_big = counted is not None and now - counted < BIG_FOR
    also = [projects.project_settings_sql, jobs.count_open_sql(["embed", "reindex"])]
    question = (data.query or "").strip()
    if question and data.stages in ("hybrid", "text"):
        also.append(fulltext.question_sql(question))
    with timed("open"):
        opening = await repo.open_find(
            session, scope, model=model, candidates=wide, also=also, known_big=known_big
        )
    if opening.big and not known_big:
        _big_since.put(size_key, now)
    return _Opened(
        model=model,
        kinds=kinds,
        wide=wide,
        filters=filters,
        opening=opening,
        settings=dict(opening.extra[0] or {}),
        pending=int(opening.extra[1] or 0),
        terms=fulltext.terms_of(opening.extra[2]) if len(also) > 2 else None,
    )


@dataclass(slots=True)
class _Run:
    """What the stages found, and how they ran."""

    found: dict[Key, Candidate]
    filters: repo.Filters  # the opening's, less the anchor unless include_self
    vector: list[float] | None  # the question's or the anchor's, when a vector stage ran
    mode: str  # the mode reported: similar | hybrid | vector | text
    stages: str  # the stages whose scores blend: hybrid | vector | text
    question: ranking.Question = field(default_factory=ranking.Question)
    anchor: str = ""  # similar_to, normalized
    warning: str | None = None  # what the find could not do (SearchResult.warning)


async def _similar(
    session: AsyncSession, scope: Scope, data: FindInput, opened: _Opened, *, raw: str
) -> _Run:
    """The vector stage from the anchor note's own vector (it must exist and be embedded)."""
    try:
        anchor = normalize_id(raw)
    except InvalidId as exc:
        raise BadRequest(f"invalid similar_to: {exc}") from exc
    if await notes.get(session, scope, anchor) is None:
        raise NoteNotFound(f"note not found: {raw}")
    vector = await vectors.vector_of(session, scope, anchor, opened.model)
    if vector is None:
        raise NotEmbeddedYet(f"note {anchor!r} is not embedded yet; try again shortly")
    used_vector = list(vector)
    filters = opened.filters
    if not data.include_self:
        filters = dataclasses.replace(filters, exclude_ids=[anchor])
    hits, _ = await repo.semantic(
        session,
        scope,
        vector=vector,
        model=opened.model,
        kinds=opened.kinds,
        filters=filters,
        limit=opened.wide,
        big=opened.opening.big,
    )
    found: dict[Key, Candidate] = {}
    _gather(found, hits, "cosine")
    return _Run(found, filters, used_vector, "similar", "vector", anchor=anchor)


async def _stages(
    session: AsyncSession,
    scope: Scope,
    data: FindInput,
    opened: _Opened,
    *,
    embedder: Embedder,
    cache: QueryCache,
) -> _Run:
    """The question's stages: full text, while the question's vector is
    computed (on the model's own thread), then the vector stage."""
    query = (data.query or "").strip()
    question = ranking.Question.read(query)
    found: dict[Key, Candidate] = {}
    wants_vector = data.stages in ("hybrid", "vector") and opened.opening.vectors > 0
    embedding = asyncio.ensure_future(cache.get(embedder, query)) if wants_vector else None
    try:
        if data.stages in ("hybrid", "text"):
            with timed("text"):
                stage = await _full_text(session, scope, opened, data.limit)
            _gather(found, stage.hits, "text")
            question = dataclasses.replace(question, full_match=stage.full_match)
    except BaseException:
        if embedding is not None:
            embedding.cancel()
        raise
    used_vector, warning = None, None
    if embedding is not None:
        try:
            used_vector = await _vector_stage(session, scope, data, opened, found, embedding)
        except ProviderError as exc:
            if data.stages != "hybrid":
                raise  # a vector-only find has nothing else to answer with: 503
            # A hybrid find still has its full-text stage: answer from it.
            log_failure(log, "query embedding failed; find answered from full text", exc)
            warning = "embedding provider unavailable: results are from the full-text stage only"
    stages = data.stages if used_vector is not None else "text"
    mode = {"hybrid": "hybrid" if used_vector is not None else "text"}.get(data.stages, data.stages)
    return _Run(
        found, opened.filters, used_vector, mode, stages, question=question, warning=warning
    )


async def _vector_stage(
    session: AsyncSession,
    scope: Scope,
    data: FindInput,
    opened: _Opened,
    found: dict[Key, Candidate],
    embedding: asyncio.Future[list[float]],
) -> list[float]:
    """The vector stage from the question's vector; the text hits it does not
    return get their cosine too (0 when not embedded yet)."""
    with timed("embed"):
        vector = list(await embedding)
    with timed("vector"):
        hits, near = await repo.semantic(
            session,
            scope,
            vector=vector,
            model=opened.model,
            kinds=opened.kinds,
            filters=opened.filters,
            limit=opened.wide,
            big=opened.opening.big,
            cosines_of=list(found) if data.stages == "hybrid" else [],
        )
    _gather(found, hits, "cosine")
    for key, c in found.items():
        if c.cosine is None:
            c.cosine = near.get(key, 0.0)  # 0: not embedded yet
            c.embedded = key in near
    return vector


def _half_life(data: FindInput, settings: Mapping[str, Any]) -> float:
    """The recency half-life in days: the query's, else the project's (0: no decay)."""
    half_life = float(settings.get("decay_half_life_days", DEFAULT_HALF_LIFE_DAYS) or 0)
    return data.half_life_days if data.half_life_days is not None else half_life


def _rank(
    data: FindInput,
    run: _Run,
    neighbours: Mapping[str, tuple[str | None, str | None]],
    half_life: float,
    explained: dict[Key, ranking.Explained] | None,
    passages: set[Key] | frozenset[Key] = frozenset(),
) -> list[tuple[Key, float]]:
    """The page: ranked (relevance, context, dates, recency), then biased (a
    weight of 0 drops the note), best first, ``limit`` of them, scores as shown."""
    final = ranking.rank(
        run.found,
        ranking.relevance(run.found.values(), run.stages, full_match=run.question.full_match),
        neighbours=neighbours,
        question=run.question,
        half_life_days=half_life,
        explain=explained,
    )
    scored = []
    for key, score in final.items():
        weight = data.bias.get(key[0], 1.0)
        if weight == 0:
            continue
        scored.append((key, score * weight))
    scored.sort(key=lambda kv: (-kv[1], kv[0]))
    scored = spread.passages_stand_for_notes(scored, explained, passages)
    if data.per_document is not None:
        scored = spread.per_document(scored, data.per_document)
    return [(key, ranking.shown(score)) for key, score in scored[: data.limit]]


def _why(
    data: FindInput,
    keyed: list[tuple[Key, ItemView, float]],
    explained: dict[Key, ranking.Explained] | None,
) -> list[tuple[ranking.Explained, float]] | None:
    """With explain: each shown item's explanation, with the bias applied last."""
    if explained is None:
        return None
    return [(explained[key], data.bias.get(key[0], 1.0)) for key, _, _ in keyed]


async def _full_text(
    session: AsyncSession, scope: Scope, opened: _Opened, limit: int
) -> fulltext.Stage:
    if opened.terms is None:  # no word to search
        return fulltext.Stage([])
    return await fulltext.full_text(
        session,
        scope,
        opened.terms,
        kinds=opened.kinds,
        filters=opened.filters,
        limit=max(limit * 10, 100),
    )


async def _deep(
    session: AsyncSession,
    scope: Scope,
    data: FindInput,
    items: list[tuple[ItemView, float]],
    vector: list[float] | None,
    model: str,
    exclude: list[str],
) -> list[tuple[str, list[tuple[ItemView, float]]]]:
    """Notes linked to the top results (edge tags, shared entities, relations
    between entities), up to ``deep_follow_depth`` hops either way: one group per top result,
    ranked by closeness in meaning to the query (or anchor), then by hops.
    Each note appears once, under the best result that reaches it; stubs
    (auto-created edge targets) are walked through but not returned."""
    primaries = list(dict.fromkeys(v.id.split("@")[0] for v, _ in items))[:DEEP_FROM]
    reached = await graph.walk(
        session, scope, start=[("note", p) for p in primaries], depth=data.deep_follow_depth
    )
    shown = set(primaries) | set(exclude)
    owner: dict[str, str] = {}
    hops: dict[str, int] = {}
    for primary in primaries:
        walked = reached[("note", primary)].items()
        for (kind, note_id), (n, _, _) in sorted(walked, key=lambda kv: kv[1][0]):
            if kind != "note" or note_id in shown or note_id in owner:
                continue
            if is_system_id(note_id) and not data.include_hidden:
                continue
            owner[note_id] = primary
            hops[note_id] = n
    if not owner:
        return []
    found = await notes.get_many(session, scope, list(owner))
    found = {k: n for k, n in found.items() if n.source != graph.STUB_SOURCE}
    if not data.include_superseded:
        found = {k: n for k, n in found.items() if "superseded_by" not in (n.tags or {})}
    closeness: dict[str, float] = {}
    if vector is not None:
        keys = [(i, "note", 0) for i in found]
        near = await repo.similarity(session, scope, keys, vector=vector, model=model)
        closeness = {k[0]: v for k, v in near.items()}
    groups: dict[str, list[tuple[ItemView, float]]] = {}
    ranked = sorted(found, key=lambda i: (-closeness.get(i, 0.0), hops[i], i))
    for note_id in ranked:
        group = groups.setdefault(owner[note_id], [])
        if len(group) < DEEP_PER_GROUP:
            group.append((note_view(found[note_id]), round(closeness.get(note_id, 0.0), 6)))
    return [(p, groups[p]) for p in primaries if groups.get(p)]


async def _views(
    session: AsyncSession, scope: Scope, scored: list[tuple[Key, float]]
) -> list[tuple[Key, ItemView, float]]:
    found = await repo.page_notes(session, scope, list({k[0] for k, _ in scored}))
    parts = await notes.get_parts_many(
        session, scope, [(k[0], k[2]) for k, _ in scored if k[1] == "part" and k[0] in found]
    )
    out: list[tuple[Key, ItemView, float]] = []
    for key, score in scored:
        note_id, kind, ref = key
        note = found.get(note_id)
        if note is None:
            continue
        if kind == "note":
            out.append((key, note_view(note), score))
        elif kind == "part":
            part = parts.get((note_id, ref))
            if part is not None:
                out.append((key, part_view(note_id, part), score))
        else:
            version = await notes.version_number(session, scope, note_id, ref)
            if version is not None:
                row, offset = version
                out.append((key, version_view(note_id, offset, row), score))
    return out
