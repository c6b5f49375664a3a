"""find: hybrid retrieval with keep's scoring (KEEP_PROTOCOL §6.7).

Vector similarity (pgvector HNSW) and full text (tsvector) are fused with
keep's weighted reciprocal rank, ``1/(60+rank_sem) + 2/(60+rank_fts)``,
normalised so 1.0 means first in both, then decayed by age:
``score * 0.5 ** (days_since_update / half_life)`` (30 days unless the project
says otherwise; 0 turns decay off). Parts are found as ``ID@P{N}``; versions,
when asked, as ``ID@V{N}``. A note is findable by full text as soon as its
put returns and by meaning once embedded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.context import timed
from app.embeddings import repository as vectors
from app.errors import BadRequest, NotEmbeddedYet, NoteNotFound
from app.graph import service as graph
from app.jobs import repository as jobs
from app.notes import repository as notes
from app.notes import tags as tagrules
from app.notes.ids import InvalidId, glob_regex, is_system_id, normalize_id
from app.notes.views import ItemView, note_view, part_view, version_view
from app.providers.embedding.base import Embedder, QueryCache
from app.search import repository as repo
from app.tenants import repository as projects
from app.timeutil import parse_when, utcnow

RRF_K = 60
SEMANTIC_WEIGHT = 1.0
TEXT_WEIGHT = 2.0
DEFAULT_HALF_LIFE_DAYS = 30.0


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


@dataclass(slots=True)
class SearchResult:
    items: list[tuple[ItemView, float]]
    pending_embedding: int
    mode: str
    deep_groups: list[tuple[str, list[tuple[ItemView, float]]]] = field(default_factory=list)


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
    )


def _key(hit: repo.Hit) -> tuple[str, str, int]:
    return hit.note_id, hit.kind, hit.ref


async def find(
    session: AsyncSession,
    scope: Scope,
    *,
    embedder: Embedder,
    cache: QueryCache,
    data: FindInput,
) -> SearchResult:
    """Notes (and parts, versions) for a query or like a given note, best first."""
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
    kinds = ["note"] + (["part"] if data.include_parts else [])
    kinds += ["version"] if data.include_versions else []
    model = embedder.model_id
    wide = max(data.limit * 10, 200)
    # One count decides both whether there are vectors at all and which path
    # (exact or HNSW) the vector stage takes.
    with timed("count"):
        stored = await repo.vector_count(session, scope, model, cap=repo.EXACT_BELOW)
    big = stored >= repo.EXACT_BELOW
    fused: dict[tuple[str, str, int], float] = {}
    stamps: dict[tuple[str, str, int], Any] = {}
    used_vector: list[float] | None = None
    anchor = ""

    if data.similar_to:
        try:
            anchor = normalize_id(data.similar_to)
        except InvalidId as exc:
            raise BadRequest(f"invalid similar_to: {exc}") from exc
        if await notes.get(session, scope, anchor) is None:
            raise NoteNotFound(f"note not found: {data.similar_to}")
        vector = await vectors.vector_of(session, scope, anchor, model)
        if vector is None:
            raise NotEmbeddedYet(f"note {anchor!r} is not embedded yet; try again shortly")
        used_vector = list(vector)
        exclude = [] if data.include_self else [anchor]
        for hit in await repo.semantic(
            session,
            scope,
            vector=vector,
            model=model,
            kinds=kinds,
            filters=_filters(data, exclude),
            limit=wide,
            big=big,
        ):
            fused.setdefault(_key(hit), hit.score)
            stamps.setdefault(_key(hit), hit.updated_at)
        mode = "similar"
    else:
        query = (data.query or "").strip()
        filters = _filters(data, [])
        text_hits: list[repo.Hit] = []
        if data.stages in ("hybrid", "text"):
            with timed("text"):
                text_hits = await repo.full_text(
                    session,
                    scope,
                    query=query,
                    kinds=kinds,
                    filters=filters,
                    limit=max(data.limit * 10, 100),
                )
        sem_hits: list[repo.Hit] = []
        if data.stages in ("hybrid", "vector") and stored > 0:
            with timed("embed"):
                used_vector = list(await cache.get(embedder, query))
            with timed("vector"):
                sem_hits = await repo.semantic(
                    session,
                    scope,
                    vector=used_vector,
                    model=model,
                    kinds=kinds,
                    filters=filters,
                    limit=wide,
                    big=big,
                )
        mode = {
            "hybrid": "hybrid" if sem_hits else "text",
            "vector": "vector",
            "text": "text",
        }[data.stages]
        # Normalise so that first place in every stage that ran scores 1.0.
        norm = (SEMANTIC_WEIGHT if sem_hits else 0.0) + (
            TEXT_WEIGHT if data.stages != "vector" else 0.0
        )
        norm = (norm or 1.0) / (RRF_K + 1)
        for weight, hits in ((SEMANTIC_WEIGHT, sem_hits), (TEXT_WEIGHT, text_hits)):
            seen: set[tuple[str, str, int]] = set()
            rank = 0
            for hit in hits:
                key = _key(hit)
                if key in seen:
                    continue
                seen.add(key)
                rank += 1
                fused[key] = fused.get(key, 0.0) + weight / (RRF_K + rank)
                stamps.setdefault(key, hit.updated_at)
        fused = {k: v / norm for k, v in fused.items()}

    settings = await projects.project_settings(session, scope)
    half_life = float(settings.get("decay_half_life_days", DEFAULT_HALF_LIFE_DAYS) or 0)
    if data.half_life_days is not None:
        half_life = data.half_life_days
    now = utcnow()
    scored = []
    for key, score in fused.items():
        if half_life > 0:
            days = max((now - stamps[key]).total_seconds(), 0) / 86400
            score *= 0.5 ** (days / half_life)
        weight = data.bias.get(key[0], 1.0)
        if weight == 0:
            continue
        scored.append((key, score * weight))
    # Sort on the exact scores (old notes decay to tiny ones); round for display.
    scored.sort(key=lambda kv: (-kv[1], kv[0]))
    top = [(key, round(score, 6)) for key, score in scored[: data.limit]]
    with timed("views"):
        items = await _views(session, scope, top)
    with timed("pending"):
        pending = await jobs.count_open(session, scope, kinds=["embed", "reindex"])
    groups = []
    if data.deep:
        anchor_ids = [] if data.include_self or not data.similar_to else [anchor]
        with timed("deep"):
            groups = await _deep(session, scope, data, items, used_vector, model, anchor_ids)
    return SearchResult(items=items, pending_embedding=pending, mode=mode, deep_groups=groups)


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
        session, scope, [("note", p) for p in primaries], depth=data.deep_follow_depth
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
    closeness: dict[str, float] = {}
    if vector is not None:
        closeness = await repo.similarity(session, scope, list(found), vector=vector, model=model)
    groups: dict[str, list[tuple[ItemView, float]]] = {}
    ranked = sorted(found, key=lambda i: (-closeness.get(i, 0.0), hops[i], i))
    for note_id in ranked:
        group = groups.setdefault(owner[note_id], [])
        if len(group) < DEEP_PER_GROUP:
            group.append((note_view(found[note_id]), round(closeness.get(note_id, 0.0), 6)))
    return [(p, groups[p]) for p in primaries if groups.get(p)]


async def _views(
    session: AsyncSession, scope: Scope, scored: list[tuple[tuple[str, str, int], float]]
) -> list[tuple[ItemView, float]]:
    found = await notes.get_many(session, scope, list({k[0] for k, _ in scored}))
    out: list[tuple[ItemView, float]] = []
    for (note_id, kind, ref), score in scored:
        note = found.get(note_id)
        if note is None:
            continue
        if kind == "note":
            out.append((note_view(note), score))
        elif kind == "part":
            part = await notes.get_part(session, scope, note_id, ref)
            if part is not None:
                out.append((part_view(note_id, part), score))
        else:
            version = await notes.version_number(session, scope, note_id, ref)
            if version is not None:
                row, offset = version
                out.append((version_view(note_id, offset, row), score))
    return out
