"""Search routes."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.deps import NoteIdDep, ReadScope, SessionDep
from app.grounding.schemas import CitationOut
from app.notes.schemas import NoteOut
from app.notes.views import ItemView
from app.search import disclosure, ranking, service
from app.search.schemas import (
    CompactLine,
    CompactRequest,
    CompactResponse,
    DeepGroup,
    Detail,
    Explanation,
    ScoredNote,
    SearchRequest,
    SearchResponse,
    Timeline,
)
from app.tenancy import Scope
from app.wire import MAX_OFFSET, api_router

router = api_router(prefix="/v1", tags=["search"])


@router.post(
    "/search",
    response_model=SearchResponse,
    response_model_exclude_unset=True,  # a result carries explain only when asked
    summary="Find notes",
)
async def search(
    body: SearchRequest,
    request: Request,
    response: Response,
    scope: ReadScope,
    session: SessionDep,
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
    result = await _run_find(body, request, response, scope, session, cite=body.cite)
    notes = [_scored(v, s) for v, s in result.items]
    for note, (why, bias) in zip(notes, result.explained or [], strict=False):
        note.explain = _explanation(why, bias)
    for note, cited in zip(notes, result.citations or [], strict=False):
        note.citation = CitationOut.of(cited) if cited is not None else None
    extra = {"citation_warning": result.citation_warning} if result.citation_warning else {}
    return SearchResponse(
        **extra,
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


#: Sent when a find answered with less than it was asked for (RFC 7234's
#: miscellaneous warning, 199): a hybrid find while the embedder is down.
WARNING_HEADER = "Warning"


async def _run_find(
    body: SearchRequest,
    request: Request,
    response: Response,
    scope: Scope,
    session: AsyncSession,
    *,
    cite: bool = False,
) -> service.SearchResult:
    result = await service.find(
        session,
        scope,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
        data=dataclasses.replace(_find_input(body), cite=cite),
    )
    if result.warning:
        response.headers[WARNING_HEADER] = f'199 keepmem "{result.warning}"'
    return result


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
        include_superseded=body.include_superseded,
        as_of=body.as_of,
        per_document=body.per_document,
    )


@router.post("/search/compact", response_model=CompactResponse, summary="Find, one line each")
async def search_compact(
    body: CompactRequest,
    request: Request,
    response: Response,
    scope: ReadScope,
    session: SessionDep,
) -> CompactResponse:
    """The same find, returned as one line per result (id, score, one-line
    summary, date) and trimmed to `token_budget`: the first step of progressive
    disclosure; follow up with `/timeline` or `/detail` on the ids that matter."""
    result = await _run_find(body, request, response, scope, session)
    kept = disclosure.fit([disclosure.line(v, s) for v, s in result.items], body.token_budget)
    return CompactResponse(
        results=[CompactLine(**e) for e in kept.entries],
        mode=result.mode,
        pending_embedding=result.pending_embedding,
        tokens=kept.tokens,
        truncated=kept.truncated,
    )


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
