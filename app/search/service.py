"""Semantic search over stored vectors (plain cosine; hybrid find comes later)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope
from app.embeddings import repository as vectors
from app.errors import BadRequest
from app.jobs import repository as jobs
from app.notes import repository as notes
from app.notes.views import ItemView, note_view
from app.providers.embedding.base import Embedder, QueryCache


@dataclass(slots=True)
class SearchResult:
    items: list[tuple[ItemView, float]]
    pending_embedding: int


async def semantic(
    session: AsyncSession,
    scope: Scope,
    *,
    embedder: Embedder,
    cache: QueryCache,
    query: str,
    limit: int,
) -> SearchResult:
    """Notes nearest in meaning to ``query`` among this project's current vectors."""
    if not query.strip():
        raise BadRequest("query is empty")
    if not 1 <= limit <= 100:
        raise BadRequest("limit must be between 1 and 100")
    vector = await cache.get(embedder, query)
    hits = await vectors.nearest(
        session, scope, vector=vector, model=embedder.model_id, limit=limit
    )
    out: list[tuple[ItemView, float]] = []
    for hit in hits:
        note = await notes.get(session, scope, hit.note_id)
        if note is not None:
            out.append((note_view(note), round(hit.score, 4)))
    pending = await jobs.count_open(session, scope, kinds=["embed", "reindex"])
    return SearchResult(items=out, pending_embedding=pending)
