"""keep's flow endpoint: the one route every keep client speaks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession

from app.deps import LimitsDep, NoteIdDep, ReadScope, SessionDep, WriteScope
from app.errors import NoteNotFound
from app.flows import exports, service
from app.flows import note_context as flow_context
from app.flows.schemas import ChangesPage, FlowRequest, FlowResult, ImportRequest, ImportResult
from app.flows.states import FlowContext
from app.notes import importing
from app.settings import Limits
from app.tenancy import Scope
from app.wire import MAX_OFFSET, api_router

router = api_router(prefix="/v1", tags=["keep"])


@router.post("/flow", response_model=FlowResult, summary="Run a keep flow")
async def flow(
    body: FlowRequest, request: Request, scope: ReadScope, session: SessionDep, limits: LimitsDep
) -> FlowResult:
    """keep's `POST /v1/flow`: run the project's `.state/<state>` doc in keep's
    state-doc language (keep's named flows are seeded: `put`, `get`, `tag`,
    `query-resolve`, `find-deep`, ...; a project adds its own), `prompt`, or
    keep's private `compat-get-item`, `compat-find`, `compat-analyze`. A flow
    that runs out of `budget` stops with a `cursor` that resumes it. A flow
    that cannot run is 200 with `status: "error"` and the reason in `data`;
    an action that refuses its input binds `{"error"}` under its rule; a key
    without the `write` scope gets a 403 for a flow that writes."""
    return await service.run(_context(request, scope, session, limits), body)


def _context(request: Request, scope: Scope, session: AsyncSession, limits: Limits) -> FlowContext:
    return FlowContext(
        session=session,
        scope=scope,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
        limits=limits,
    )


@router.get(
    "/notes/{note_id}/context",
    summary="A note with what surrounds it (keep's ItemContext)",
)
async def context(
    note_id: NoteIdDep,
    request: Request,
    scope: ReadScope,
    session: SessionDep,
    limits: LimitsDep,
    similar_limit: Annotated[int, Query(ge=0, le=100)] = 3,
    meta_limit: Annotated[int, Query(ge=0, le=100)] = 3,
    parts_limit: Annotated[int, Query(ge=0, le=1000)] = 10,
    edges_limit: Annotated[int, Query(ge=0, le=100)] = 5,
    versions_limit: Annotated[int, Query(ge=0, le=1000)] = 3,
    include_similar: bool = True,
    include_meta: bool = True,
    include_parts: bool = True,
    include_versions: bool = True,
    version: Annotated[int | None, Query(ge=0, le=MAX_OFFSET)] = None,
) -> dict[str, Any]:
    """The note (or its version `version`), similar notes, notes whose edge
    tags point at it, its parts and the versions around it, in the exact
    shape keep's `get_context` parses (no other keys)."""
    ctx = _context(request, scope, session, limits)
    found = await flow_context.item_context(
        ctx,
        note_id,
        flow_context.ContextQuery(
            similar_limit=similar_limit,
            meta_limit=meta_limit,
            parts_limit=parts_limit,
            edges_limit=edges_limit,
            versions_limit=versions_limit,
            include_similar=include_similar,
            include_meta=include_meta,
            include_parts=include_parts,
            include_versions=include_versions,
            version=version,
        ),
    )
    if found is None:
        raise NoteNotFound(f"note not found: {note_id}")
    return found


@router.get("/export", summary="Export the project (keep-export)")
async def export(
    request: Request,
    scope: ReadScope,
    include_system: bool = False,
    stream: Annotated[str | None, Query(description="`ndjson` to stream.", max_length=20)] = None,
) -> Response:
    """Every note with its versions and parts in keep's export format: with
    `stream=ndjson` a header line (counts) then one document per line, else
    one JSON object with `documents`."""
    db = request.app.state.db
    if stream == "ndjson":
        return StreamingResponse(
            exports.ndjson(db, scope, include_system=include_system),
            media_type="application/x-ndjson",
        )
    return JSONResponse(await exports.envelope(db, scope, include_system=include_system))


@router.get("/export/bundles/{note_id}", summary="Export one note with its incoming edges")
async def export_bundle(
    note_id: NoteIdDep,
    scope: ReadScope,
    session: SessionDep,
    include_system: bool = False,
    include_parts: bool = True,
    include_versions: bool = True,
) -> dict[str, Any]:
    """One note as keep's markdown export reads it: the document, the edges
    pointing at it, and the edge-tag keys."""
    return await exports.bundle(
        session,
        scope,
        raw_id=note_id,
        include_parts=include_parts,
        include_versions=include_versions,
    )


@router.get(
    "/export/changes", response_model=ChangesPage, summary="The change feed (keep-export-changes)"
)
async def export_changes(
    scope: ReadScope,
    session: SessionDep,
    cursor: Annotated[
        str, Query(description='`cursor` of the previous page (opaque); "0" at the start.')
    ] = "0",
    limit: Annotated[int, Query(ge=0, le=exports.MAX_CHANGES)] = 1000,
) -> dict[str, Any]:
    """Writes to the project after `cursor`, oldest first; pass the returned
    `cursor` for the next page (`limit` 0 reads only `head_cursor`). A
    cursor is the id of the last change seen: text that is not one is a
    400; one naming no change of this project answers `compacted` (start
    again from a full export, then follow from `cursor`)."""
    return await exports.changes(session, scope, cursor=cursor, limit=limit)


@router.post("/import", response_model=ImportResult, summary="Import keep-export documents")
async def import_(
    body: ImportRequest, scope: WriteScope, session: SessionDep, limits: LimitsDep
) -> ImportResult:
    """Notes with their versions, parts, tags and timestamps, from a keep
    export (one request, so an import is never split by the rate limit).
    `merge` skips notes that exist; `replace` overwrites them."""
    done = await importing.import_documents(
        session, scope, documents=body.documents, mode=body.mode, limits=limits
    )
    return ImportResult(
        imported=done.imported,
        versions=done.versions,
        parts=done.parts,
        skipped=done.skipped,
        queued=done.queued,
    )
