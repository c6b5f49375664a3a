"""Grounding routes: citations (create, read, verify, open) and re-cutting
a project's long notes into passages."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query, Response

from app.deps import ReadScope, SessionDep, SettingsDep, WriteScope
from app.grounding import citations, passages, render
from app.grounding.schemas import (
    CitationCheck,
    CitationList,
    CitationOut,
    CiteIn,
    RechunkIn,
    RechunkOut,
    VerifyOut,
)
from app.wire import api_router

router = api_router(prefix="/v1", tags=["grounding"])
CitationId = Annotated[str, Path(min_length=1, max_length=256, description="cit_ and hex digits.")]


@router.post("/citations", response_model=CitationOut, summary="Cite a passage or a span")
async def create_citation(body: CiteIn, scope: WriteScope, session: SessionDep) -> CitationOut:
    """Cite a passage (`part`), a character range (`start`, `end`) or a `quote`
    of a note: the exact quote, context, the sha256 of the note's text, the
    version, the source and page. Needs the project to keep text
    (`keep_text`: 409 `text_not_kept` otherwise). Citing the same span of the
    same text again returns the stored citation."""
    view = await citations.create(
        session,
        scope,
        data=citations.CiteInput(
            note=body.note,
            part=body.part,
            start=body.start,
            end=body.end,
            quote=body.quote,
            context_chars=body.context_chars,
        ),
    )
    return CitationOut.of(view)


@router.get("/citations", response_model=CitationList, summary="List citations")
async def list_citations(
    scope: ReadScope,
    session: SessionDep,
    note: Annotated[str | None, Query(max_length=1024, description="Of this note only.")] = None,
    limit: Annotated[int, Query(ge=1, le=citations.MAX_LIST)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> CitationList:
    """The project's citations, newest first."""
    found, more = await citations.list_citations(
        session, scope, note=note, limit=limit, cursor=cursor
    )
    return CitationList(citations=[CitationOut.of(c) for c in found], next_cursor=more)


@router.post("/citations/verify", response_model=VerifyOut, summary="Verify a citation as given")
async def verify_given(body: CitationCheck, scope: ReadScope, session: SessionDep) -> VerifyOut:
    """Verify a citation that was not stored (find's `cite: true` results)."""
    view = citations.CitationView(
        id=citations.citation_id(body.note, body.text_sha256, body.start, body.end),
        note=body.note,
        version=body.version,
        part=body.part,
        start=body.start,
        end=body.end,
        quote=body.quote,
        before="",
        after="",
        text_sha256=body.text_sha256,
        source_uri=None,
        locator={},
        created_at=None,
        stored=False,
    )
    return VerifyOut.of(await citations.verify_given(session, scope, citation=view))


@router.get("/citations/{citation_id}", response_model=CitationOut, summary="Get a citation")
async def get_citation(
    citation_id: CitationId, scope: ReadScope, session: SessionDep
) -> CitationOut:
    """A stored citation, as it was made (verify checks it against the note now)."""
    return CitationOut.of(await citations.get(session, scope, citation_id=citation_id))


@router.delete("/citations/{citation_id}", summary="Delete a citation")
async def delete_citation(
    citation_id: CitationId, scope: WriteScope, session: SessionDep
) -> dict[str, str]:
    """Forget a citation (the note is not touched)."""
    await citations.delete(session, scope, citation_id=citation_id)
    return {"deleted": citation_id}


@router.post(
    "/citations/{citation_id}/verify", response_model=VerifyOut, summary="Verify a citation"
)
async def verify(citation_id: CitationId, scope: ReadScope, session: SessionDep) -> VerifyOut:
    """Re-read the note's text: `valid` (its sha256 is the one cited),
    `changed` (with a diagnosis: the quote still at its span, moved, or
    gone), `gone` (the note was deleted) or `unverifiable` (text not kept)."""
    return VerifyOut.of(await citations.verify(session, scope, citation_id=citation_id))


@router.get(
    "/citations/{citation_id}/open",
    summary="Open a citation: the text with the span marked",
    responses={200: {"content": {"text/html": {}, "text/plain": {}}}},
)
async def open_citation(
    citation_id: CitationId,
    scope: ReadScope,
    session: SessionDep,
    format: Annotated[Literal["html", "text"], Query()] = "html",
) -> Response:
    """The note's current text around the quote, the quote marked (`<mark>`
    in HTML, `[[` `]]` in text), with the verdict in headers
    (`X-Citation-Status`, `X-Citation-Diagnosis`)."""
    opened = await citations.open_citation(session, scope, citation_id=citation_id)
    if format == "text":
        return Response(
            render.as_text(opened),
            media_type="text/plain; charset=utf-8",
            headers=render.headers(opened),
        )
    return Response(
        render.as_html(opened),
        media_type="text/html; charset=utf-8",
        headers=render.headers(opened),
    )


@router.post("/passages/rechunk", response_model=RechunkOut, summary="Re-cut long notes")
async def rechunk(
    body: RechunkIn, scope: WriteScope, session: SessionDep, settings: SettingsDep
) -> RechunkOut:
    """Queue chunk jobs for a batch of the project's long notes (those whose
    text is still held or kept): their passages are cut again with the
    server's passage size, through the pipeline. Call again with
    `next_after` until it is null."""
    done = await passages.rechunk(
        session,
        scope,
        min_chars=settings.chunk_min_chars,
        after=body.after,
        limit=body.limit,
    )
    return RechunkOut(
        queued=done.queued, without_text=done.without_text, next_after=done.next_after
    )
