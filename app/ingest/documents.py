"""Documents into notes: uploads (read in the request) and fetched URIs (read
by the worker), sanitised before anything is stored, OCR for images and
scanned pages.

Extracted tags (title, author, camera, artist, …) are merged under the
user's: a key the user gave, now or before, keeps the user's value. An
upload's text is read and sanitised in the request, so the original file is
never stored; only images that still need OCR are held, until their job is
done. Text that is still to come is announced by a placeholder summary.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, DocumentUnreadable, PayloadTooLarge
from app.ingest import extract as extractors
from app.ingest import repository as repo
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction
from app.notes import repository as notes
from app.notes import service as note_service
from app.notes.views import ItemView, split_system
from app.providers.errors import ProviderError
from app.providers.media.describe import Describer
from app.providers.ocr.base import OCR
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants

_TAG_KEY = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,127}$")


@dataclass(slots=True)
class Document:
    kind: str  # media type it was read as
    text: str
    tags: dict[str, str]
    images: list[bytes]  # still to be OCR'd
    note: str = ""


async def read(
    data: bytes,
    *,
    content_type: str | None,
    filename: str | None = None,
    charset: str | None = None,
    max_pdf_pages: int = 1000,
) -> Document:
    """Extract text, tags and OCR-bound images (on a worker thread)."""
    kind = extractors.media_type(content_type, filename, data)
    found = await asyncio.to_thread(
        extractors.extract, data, kind, charset=charset, max_pdf_pages=max_pdf_pages
    )
    tags = {k: v[:4096] for k, v in found.tags.items() if _TAG_KEY.match(k) and v and v.strip()}
    if filename and "filename" not in tags:
        tags["filename"] = filename[:4096]
    return Document(kind=kind, text=found.text, tags=tags, images=found.images, note=found.note)


async def recognize(
    ocr: OCR, images: Sequence[bytes], describer: Describer | None = None
) -> tuple[str, float]:
    """OCR text of the images (in order) and the mean confidence; with a
    describer, each image's description too."""
    texts, confidences = [], []
    for image in images:
        result = await ocr.recognize(image)
        if result.text.strip():
            texts.append(result.text)
            confidences.append(result.confidence)
        if describer is not None:
            kind = extractors.media_type(None, None, image)
            seen = await describer.describe(
                image, kind if kind.startswith("image/") else "image/png"
            )
            if seen:
                texts.append(f"Image: {seen}")
    confidence = sum(confidences) / len(confidences) if confidences else 0.0
    return "\n\n".join(texts), confidence


def _clean(doc_text: str, tags: Mapping[str, str], enabled: bool) -> tuple[str, dict[str, str]]:
    if not enabled:
        return doc_text, dict(tags)
    return redaction.clean(doc_text), {k: redaction.clean(v) for k, v in tags.items()}


async def store(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    text: str,
    found_tags: Mapping[str, str],
    user_tags: Mapping[str, Any] | None,
    content_type: str,
    limits: Limits,
    uri: str | None = None,
    placeholder: str | None = None,
    analyze: bool = False,
) -> ItemView:
    """Put a document's text as the note's content; user tags win over found ones."""
    enabled = await tenants.sanitizing(session, scope)
    text, found = _clean(text, found_tags, enabled)
    existing = await notes.get(session, scope, note_id)
    given = dict(user_tags or {})
    kept = split_system(existing.tags)[0] if existing is not None else {}
    tags: dict[str, Any] = {k: v for k, v in found.items() if k not in given and k not in kept}
    tags.update(given)
    if placeholder is None and not text.strip():
        text = f"({content_type} document with no readable text)"
    return await note_service.put(
        session,
        scope,
        data=note_service.PutInput(
            content=text[: limits.max_content_chars],
            id=note_id,
            uri=uri,
            tags=tags,
            content_type=content_type,
            placeholder=placeholder,
            analyze=analyze and placeholder is None,
        ),
        limits=limits,
    )


@dataclass(frozen=True, slots=True)
class Delivered:
    """A document's text that background work (fetch, OCR) delivers for a note."""

    text: str
    found_tags: Mapping[str, Any]
    user_tags: Mapping[str, Any]
    content_type: str
    uri: str | None = None
    analyze: bool = False


async def deliver(
    session: AsyncSession, scope: Scope, *, note_id: str, doc: Delivered, limits: Limits
) -> ItemView:
    """Store what a fetch or OCR job delivered as the note's content."""
    return await store(
        session,
        scope,
        note_id=note_id,
        text=doc.text,
        found_tags=doc.found_tags,
        user_tags=doc.user_tags,
        content_type=doc.content_type,
        limits=limits,
        uri=doc.uri,
        analyze=doc.analyze,
    )


async def upload(
    session: AsyncSession,
    scope: Scope,
    *,
    data: bytes,
    filename: str | None,
    content_type: str | None,
    note_id: str | None,
    user_tags: Mapping[str, Any] | None,
    limits: Limits,
    max_upload_bytes: int,
    max_pdf_pages: int,
) -> ItemView:
    """A file sent to ``POST /v1/upload``: read and sanitised now; its images
    (photos, scanned pages) queued for OCR with a placeholder until then."""
    if len(data) > max_upload_bytes:
        raise PayloadTooLarge(f"file is {len(data)} bytes; the limit is {max_upload_bytes}")
    if not data:
        raise BadRequest("the file is empty")
    try:
        doc = await read(
            data, content_type=content_type, filename=filename, max_pdf_pages=max_pdf_pages
        )
    except ProviderError as exc:  # unreadable or hostile file, missing reader
        raise DocumentUnreadable(str(exc)) from exc
    name = filename or "upload"
    target = note_service.valid_id(note_id or name)
    if doc.images:
        text = doc.text or f"{name}: {doc.kind}, text to follow (OCR)"
        view = await store(
            session,
            scope,
            note_id=target,
            text=text,
            found_tags=doc.tags,
            user_tags=user_tags,
            content_type=doc.kind,
            limits=limits,
            placeholder="ocr",
        )
        enabled = await tenants.sanitizing(session, scope)
        layer, found = _clean(doc.text, doc.tags, enabled)
        job_id = await jobs.enqueue(
            session,
            scope,
            kind=JobKind.OCR,
            note_id=target,
            payload={
                "text": layer,
                "tags": found,
                "user_tags": dict(user_tags or {}),
                "content_type": doc.kind,
            },
        )
        await repo.hold_images(session, scope, target, job_id, doc.images)
        view.pending = sorted({*view.pending, JobKind.OCR.value})
        return view
    return await store(
        session,
        scope,
        note_id=target,
        text=doc.text,
        found_tags=doc.tags,
        user_tags=user_tags,
        content_type=doc.kind,
        limits=limits,
    )


async def held_images(session: AsyncSession, scope: Scope, *, job_id: int) -> list[bytes]:
    return await repo.held_images(session, scope, job_id)


async def release_images(session: AsyncSession, scope: Scope, *, job_id: int) -> None:
    await repo.release_images(session, scope, job_id)
