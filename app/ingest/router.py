"""File upload."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import File, Form, UploadFile

from app.deps import LimitsDep, SessionDep, SettingsDep, WriteScope
from app.errors import BadRequest, PayloadTooLarge
from app.ingest import documents
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
    file: Annotated[UploadFile, File(description="HTML, PDF, DOCX, PPTX, image, audio, text")],
    id: Annotated[str | None, Form(description="Note id (default: the file name).")] = None,
    tags: Annotated[str | None, Form(description='Tags as JSON: {"key": "value"}.')] = None,
) -> NoteOut:
    """Store a document as a note: its text (sanitised) becomes the content,
    what it says about itself (title, author, camera, artist …) becomes tags
    under the ones you give. Photos and scanned pages get a placeholder now
    and their OCR text shortly after (job `ocr`). The file itself is not kept."""
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
    )
    return NoteOut.of(view)
