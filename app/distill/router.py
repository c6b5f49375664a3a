"""Distillation routes: a memory from chosen sources, and the provenance of
a note both ways (what it was derived from, what was derived from it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request

from app.deps import LimitsDep, NoteIdDep, ReadScope, SessionDep, SettingsDep, WriteScope
from app.distill import provenance, service
from app.distill.schemas import (
    DerivedItem,
    DerivedOut,
    DistillIn,
    DistillOut,
    OriginOut,
    ProvenanceOut,
)
from app.wire import ErrorOut, api_router

router = api_router(prefix="/v1", tags=["distill"])

_UNUSABLE = {
    502: {
        "model": ErrorOut,
        "description": "The memory model's reply was not the JSON asked for: nothing stored.",
    }
}


@router.post(
    "/distill",
    response_model=DistillOut,
    responses=_UNUSABLE,  # type: ignore[arg-type]
    summary="Distil a memory from cited passages",
)
async def distill(
    body: DistillIn,
    request: Request,
    scope: WriteScope,
    session: SessionDep,
    settings: SettingsDep,
    limits: LimitsDep,
) -> DistillOut:
    """Make one memory from 1-50 sources (citation ids, or passages and
    ranges, cited on the way) with a `derived_from` edge to each passage.
    With `statement` it is stored as written; without, the server's memory
    model writes it with the project's `.prompt/distill/<prompt>` doc
    (its tokens count against the memories' daily budget: 429 when spent;
    502 when its reply is unusable). No model and no statement: 400, write
    the statement yourself. Reconciled as POST /v1/memories is."""
    done = await service.distill(
        session,
        scope,
        data=body.to_input(),
        limits=limits,
        models=service.Models(
            embedder=request.app.state.embedder,
            cache=request.app.state.query_cache,
            settings=settings,
            db=request.app.state.db,
        ),
    )
    return DistillOut.of(done)


@router.get(
    "/notes/{note_id}/provenance",
    response_model=ProvenanceOut,
    summary="What a note was derived from",
)
async def note_provenance(
    note_id: NoteIdDep, scope: ReadScope, session: SessionDep
) -> ProvenanceOut:
    """The note's `derived_from` edges: each passage (`ID@P{N}`) or note with
    its summary and span, and the note's citations that quote it."""
    asked, found = await provenance.provenance(session, scope, raw_id=note_id)
    return ProvenanceOut(id=asked, provenance=[OriginOut.of(o) for o in found])


@router.get(
    "/notes/{note_id}/derived",
    response_model=DerivedOut,
    summary="What was derived from a note or its passages",
)
async def note_derived(
    note_id: NoteIdDep,
    scope: ReadScope,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=provenance.MAX_DERIVED)] = 100,
) -> DerivedOut:
    """The memories (and other notes) derived from this note or any of its
    passages (from one passage when the id is `ID@P{N}`), newest first."""
    asked, found = await provenance.derived(session, scope, raw_id=note_id, limit=limit)
    return DerivedOut(id=asked, derived=[DerivedItem.of(d) for d in found])
