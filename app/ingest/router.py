"""File upload and same-site crawls."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import File, Form, UploadFile

from app.deps import LimitsDep, SessionDep, SettingsDep, WriteScope
from app.errors import BadRequest, PayloadTooLarge
from app.ingest import crawl, documents
from app.ingest.schemas import CrawlIn, CrawlStarted
from app.kit.fetch import FetchPolicy
from app.middleware import UPLOAD_PATH
from app.notes.schemas import NoteOut
from app.wire import api_router, loads

router = api_router(prefix="/v1", tags=["notes"])


@router.post(
    UPLOAD_PATH.removeprefix("/v1"),
    response_model=NoteOut,
    summary="Upload a document",
    responses={413: {"description": "The file is larger than max_upload_bytes."}},
)
async def upload(
    scope: WriteScope,
    session: SessionDep,
    limits: LimitsDep,
    settings: SettingsDep,
    file: Annotated[
        UploadFile,
        File(description="HTML, PDF, DOCX, PPTX, XLSX, SRT, WebVTT, image, audio, text"),
    ],
    id: Annotated[
        str | None,
        Form(description="Note id (default: % and the first 12 hex digits of the file's sha256)."),
    ] = None,
    tags: Annotated[str | None, Form(description='Tags as JSON: {"key": "value"}.')] = None,
) -> NoteOut:
    """Store a document as a note: its text (sanitised) becomes the content,
    what it says about itself (title, author, camera, artist …) becomes tags
    under the ones you give. Photos and scanned pages get a placeholder now
    and their OCR text shortly after (job `ocr`); so does audio, its transcript
    with times (job `transcribe`), when the server has a transcription
    provider (else its metadata line is its text). The file itself is not kept.

    Without `id`, the note is named by the file's content (`%` and 12 hex
    digits of its sha256): sending the same file again updates that note,
    two different files of one name are two notes. The file name is kept in
    the `filename` tag. Where a format has places (PDF pages, slides, sheets,
    subtitle cues), the note knows which part of its text came from which."""
    user_tags: dict[str, Any] | None = None
    if tags:
        try:
            user_tags = loads(tags, where="tags")
        except json.JSONDecodeError as exc:
            raise BadRequest(f"tags must be a JSON object: {exc}") from exc
        if not isinstance(user_tags, dict):
            raise BadRequest("tags must be a JSON object")
    data = await file.read(settings.max_upload_bytes + 1)
    if len(data) > settings.max_upload_bytes:
        raise PayloadTooLarge(f"file is larger than the limit of {settings.max_upload_bytes} bytes")
    view = await documents.upload(
        session,
        scope,
        data=data,
        filename=file.filename,
        content_type=file.content_type,
        note_id=id,
        user_tags=user_tags,
        limits=limits,
        max_upload_bytes=settings.max_upload_bytes,
        max_pdf_pages=settings.max_pdf_pages,
        transcribe=settings.transcription_provider != "none",
    )
    return NoteOut.of(view)


@router.post(
    "/crawl",
    response_model=CrawlStarted,
    status_code=202,
    summary="Crawl a site",
)
async def start_crawl(
    body: CrawlIn, scope: WriteScope, session: SessionDep, settings: SettingsDep
) -> CrawlStarted:
    """Store a page and the pages of the same site it links to, each as a
    note (id = its URL, tag `crawl` = the root), within the depth, page and
    byte limits; robots.txt is obeyed. The root is checked now (a refused
    address is a 400 and nothing is queued); the crawl runs in the
    background as `crawl` jobs, each a batch of pages whose result says what
    was stored and skipped (robots, off-site, refused, errors) and names the
    next job."""
    started = await crawl.start(
        session,
        scope,
        uri=body.uri,
        limits=crawl.CrawlLimits(body.max_depth, body.max_pages, body.max_bytes),
        tags=body.tags,
        path_prefix=body.path_prefix,
        policy=FetchPolicy.for_settings(settings),
    )
    return CrawlStarted.of(started)
