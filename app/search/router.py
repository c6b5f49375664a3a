"""Search routes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from app.deps import ReadScope, SessionDep
from app.notes.schemas import NoteOut
from app.search import service

router = APIRouter(prefix="/v1", tags=["search"])


class SearchRequest(BaseModel):
    query: str = Field(description="What to look for, in words.")
    limit: int = Field(default=10, ge=1, le=100)


class ScoredNote(NoteOut):
    score: float


class SearchResponse(BaseModel):
    notes: list[ScoredNote]
    pending_embedding: int = Field(
        description="Notes not yet embedded, so not yet findable by meaning."
    )


@router.post("/search", response_model=SearchResponse, summary="Find notes by meaning")
async def search(
    body: SearchRequest, request: Request, scope: ReadScope, session: SessionDep
) -> SearchResponse:
    """Notes nearest in meaning to `query` (cosine over the stored vectors)."""
    result = await service.semantic(
        session,
        scope,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
        query=body.query,
        limit=body.limit,
    )
    return SearchResponse(
        notes=[ScoredNote(**NoteOut.of(v).model_dump(), score=s) for v, s in result.items],
        pending_embedding=result.pending_embedding,
    )
