"""Search routes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from sqlalchemy.ext.asyncio import AsyncSession

from app.deps import NoteIdDep, ReadScope, SessionDep
from app.kit.ids import MAX_ID_LENGTH
from app.notes.schemas import NoteOut
from app.notes.views import ItemView
from app.search import disclosure, ranking, service
from app.tenancy import Scope
from app.wire import MAX_OFFSET, api_router

# A question, not a document: longer ones are refused (the full-text stage
# uses at most a dozen of its words anyway).
MAX_QUERY_CHARS = 10_000

router = api_router(prefix="/v1", tags=["search"])


class SearchRequest(BaseModel):
    """keep's find request (daemon ``FindRequest``), plus parts/versions/bias."""

    model_config = ConfigDict(extra="ignore")

    query: str | None = Field(
        default=None,
        max_length=MAX_QUERY_CHARS,
        description=f"What to look for, in words (at most {MAX_QUERY_CHARS} characters).",
    )
    similar_to: str | None = Field(
        default=None, max_length=MAX_ID_LENGTH, description="A note id: find notes like it."
    )
    tags: dict[str, Any] | None = Field(
        default=None, description="key -> value(s); every key must match (a pre-filter)."
    )
    since: str | None = Field(
        default=None, max_length=64, description="ISO-8601 duration (P3D) or date."
    )
    until: str | None = Field(default=None, max_length=64, description="ISO-8601 duration or date.")
    scope: str | None = Field(
        default=None, max_length=MAX_ID_LENGTH, description="Id glob the results must match."
    )
    limit: int = Field(default=10, ge=1, le=100)
    include_self: StrictBool = Field(default=False, description="With similar_to: keep the anchor.")
    include_hidden: StrictBool = Field(default=False, description="Include system notes.")
    include_parts: StrictBool = Field(default=True, description="Search parts (ID@P{N}) too.")
    include_versions: StrictBool = Field(
        default=False, description="Search earlier versions (ID@V{N}) too."
    )
    bias: dict[str, float] | None = Field(
        default=None, description="{id: weight}: 0 excludes, <1 demotes, >1 boosts."
    )
    stages: Literal["hybrid", "vector", "text"] = Field(
        default="hybrid", description="hybrid, or one stage alone: vector or text."
    )
    half_life_days: float | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="Half-life of the recency bonus for this query (0 = none): the "
        "newest candidate gets the full bonus, one half-life older half of it. A bonus, "
        "not a multiplier: an old note as relevant as a new one loses only a tie. "
        "Default: the project's setting, 30 days.",
    )
    deep: StrictBool = Field(
        default=False,
        description="Also follow edges (edge tags such as speaker, extracted relations) "
        "from the top results, and return what they reach in deep_groups.",
    )
    deep_follow_depth: int = Field(default=10, ge=1, le=100, description="Hops to follow.")
    explain: StrictBool = Field(
        default=False,
        description="Return with each result how its score came about (stage scores, "
        "relevance, each bonus, bias). /v1/search only; compact lines carry none.",
    )


class Explanation(BaseModel):
    """One result's score, stage by stage. ``score`` = min(1, (relevance +
    neighbour + episode + date + tag + recency) / scale x bias)."""

    vector: float | None = Field(
        description="Cosine similarity to the question (or the similar_to note); "
        "null when the vector stage did not run, 0 when the note is not embedded yet."
    )
    text: float = Field(description="Full-text score over the best full-text score (0-1).")
    bm25: float | None = Field(description="Raw BM25 score; null if full text did not find it.")
    relevance: float = Field(description="Fusion of the stages: 0.3 x text + 0.7 x vector.")
    neighbour: float = Field(description="Bonus from its best timeline neighbour.")
    episode: float = Field(description="Bonus from the best match within an hour of it.")
    date: float = Field(description="Bonus: created on a date the question names.")
    tag: float = Field(description="Bonus: the question names one of its tag values.")
    recency: float = Field(description="Recency bonus (half-life as asked).")
    scale: float = Field(description="What the sum is divided by (a lone perfect match's sum).")
    bias: float = Field(description="The bias weight applied last (1: none).")
    context_only: bool = Field(description="No stage found it: it joined as a hit's neighbour.")


class ScoredNote(NoteOut):
    score: float
    explain: Explanation | None = Field(default=None, description="With explain: true.")


class DeepGroup(BaseModel):
    id: str = Field(description="The top result these notes were reached from.")
    items: list[ScoredNote] = Field(description="Closest in meaning to the query first.")


class SearchResponse(BaseModel):
    notes: list[ScoredNote]
    deep_groups: list[DeepGroup] = Field(
        default_factory=list, description="With deep: notes linked to the results."
    )
    mode: str = Field(description="hybrid, text (no vectors yet) or similar")
    pending_embedding: int = Field(
        description="Notes not yet embedded, so not yet findable by meaning."
    )


@router.post(
    "/search",
    response_model=SearchResponse,
    response_model_exclude_unset=True,  # a result carries explain only when asked
    summary="Find notes",
)
async def search(
    body: SearchRequest, request: Request, scope: ReadScope, session: SessionDep
) -> SearchResponse:
    """Hybrid find: meaning (vectors) and words (BM25 full text) blended by
    score; the best hits' neighbours on the timeline (the notes just before
    and after, within an hour) join as their context; a date the question
    names ("on 8 May, 2023", "in July 2023") favours notes of that time, and
    newer notes get a small bonus (half-life 30 days) that never overrides
    relevance. Scores run from 0 to 1 (1: a perfect match in both stages).
    Filters by tags, time and id glob apply inside both searches and to the
    context. Or, with `similar_to`, the notes nearest in meaning to a stored
    note."""
    result = await _run_find(body, request, scope, session)
    notes = [_scored(v, s) for v, s in result.items]
    for note, (why, bias) in zip(notes, result.explained or [], strict=False):
        note.explain = _explanation(why, bias)
    return SearchResponse(
        notes=notes,
        deep_groups=[
            DeepGroup(id=primary, items=[_scored(v, s) for v, s in group])
            for primary, group in result.deep_groups
        ],
        mode=result.mode,
        pending_embedding=result.pending_embedding,
    )


def _scored(view: ItemView, score: float) -> ScoredNote:
    return ScoredNote(**NoteOut.of(view).model_dump(), score=score)


def _explanation(why: ranking.Explained, bias: float) -> Explanation:
    r = ranking.shown
    return Explanation(
        vector=None if why.vector is None else r(why.vector),
        text=r(why.text),
        bm25=None if why.bm25 is None else round(why.bm25, 6),
        relevance=r(why.relevance),
        neighbour=r(why.neighbour),
        episode=r(why.episode),
        date=r(why.date),
        tag=r(why.tag),
        recency=r(why.recency),
        scale=ranking.SCALE,
        bias=bias,
        context_only=why.context_only,
    )


async def _run_find(
    body: SearchRequest, request: Request, scope: Scope, session: AsyncSession
) -> service.SearchResult:
    return await service.find(
        session,
        scope,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
        data=_find_input(body),
    )


def _find_input(body: SearchRequest) -> service.FindInput:
    return service.FindInput(
        query=body.query,
        similar_to=body.similar_to,
        tags=body.tags,
        since=body.since,
        until=body.until,
        scope=body.scope,
        include_hidden=body.include_hidden,
        include_self=body.include_self,
        include_parts=body.include_parts,
        include_versions=body.include_versions,
        limit=body.limit,
        bias=body.bias or {},
        stages=body.stages,
        half_life_days=body.half_life_days,
        deep=body.deep,
        deep_follow_depth=body.deep_follow_depth,
        explain=body.explain,
    )


class CompactRequest(SearchRequest):
    token_budget: int | None = Field(
        default=None,
        ge=1,
        le=MAX_OFFSET,
        description="Stop adding results past this many tokens (~chars/4).",
    )


class CompactLine(BaseModel):
    id: str
    score: float | None = None
    summary: str = Field(description="One line, at most 160 characters.")
    date: str = Field(description="Date of the last change, YYYY-MM-DD.")


class CompactResponse(BaseModel):
    results: list[CompactLine]
    mode: str
    pending_embedding: int
    tokens: int
    truncated: bool


@router.post("/search/compact", response_model=CompactResponse, summary="Find, one line each")
async def search_compact(
    body: CompactRequest, request: Request, scope: ReadScope, session: SessionDep
) -> CompactResponse:
    """The same find, returned as one line per result (id, score, one-line
    summary, date) and trimmed to `token_budget`: the first step of progressive
    disclosure; follow up with `/timeline` or `/detail` on the ids that matter."""
    result = await _run_find(body, request, scope, session)
    kept = disclosure.fit([disclosure.line(v, s) for v, s in result.items], body.token_budget)
    return CompactResponse(
        results=[CompactLine(**e) for e in kept.entries],
        mode=result.mode,
        pending_embedding=result.pending_embedding,
        tokens=kept.tokens,
        truncated=kept.truncated,
    )


class Timeline(BaseModel):
    note: CompactLine
    tags: list[str] = Field(description="The note's tags that chose the neighbours.")
    before: list[CompactLine] = Field(description="Earlier notes, oldest first.")
    after: list[CompactLine] = Field(description="Later notes, oldest first.")
    tokens: int
    truncated: bool


class DetailHead(BaseModel):
    id: str
    summary: str
    tags: dict[str, Any]


class Detail(BaseModel):
    note: DetailHead
    parts: list[CompactLine]
    versions: list[CompactLine]
    tokens: int
    truncated: bool


@router.get(
    "/notes/{note_id}/timeline",
    response_model=Timeline,
    response_model_exclude_unset=True,  # lines carry a score only in a find
    summary="What came before and after a note",
)
async def timeline(
    note_id: NoteIdDep,
    scope: ReadScope,
    session: SessionDep,
    before: Annotated[int, Query(ge=0, le=100)] = 5,
    after: Annotated[int, Query(ge=0, le=100)] = 5,
    token_budget: Annotated[int | None, Query(ge=1, le=MAX_OFFSET)] = None,
) -> Timeline:
    """Notes just before and after this one in time, among notes sharing any of
    its tags (all notes when it has none), one line each, nearest first when
    the token budget trims."""
    found = await disclosure.timeline(
        session, scope, raw_id=note_id, before=before, after=after, token_budget=token_budget
    )
    return Timeline.model_validate(found)


@router.get(
    "/notes/{note_id}/detail",
    response_model=Detail,
    response_model_exclude_unset=True,
    summary="A note in full, with parts and history",
)
async def detail(
    note_id: NoteIdDep,
    scope: ReadScope,
    session: SessionDep,
    token_budget: Annotated[int | None, Query(ge=1, le=MAX_OFFSET)] = None,
) -> Detail:
    """The note's full summary and tags, then its parts and earlier versions
    (one line each) while they fit the token budget."""
    found = await disclosure.detail(session, scope, raw_id=note_id, token_budget=token_budget)
    return Detail.model_validate(found)
