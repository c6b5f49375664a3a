"""Documents into notes: uploads (read in the request) and fetched URIs (read
by the worker), sanitised before anything is stored, OCR for images and
scanned pages.

Extracted tags (title, author, camera, artist, …) are merged under the
user's: a key the user gave, now or before, keeps the user's value. An
upload's text is read and sanitised in the request, so the original file is
never stored; only images that still need OCR are held, until their job is
done. Text that is still to come is announced by a placeholder summary.

A document's segments (its pages, slides, sheets, cues: ``app.kit.spans``)
travel with its text to the note, their offsets kept right through
sanitising (``sanitized``) and the content cap.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, DocumentUnreadable, PayloadTooLarge
from app.ingest import extract as extractors
from app.ingest import repository as repo
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction, spans
from app.kit.spans import Segment
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
    segments: list[Segment] = field(default_factory=list)


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
    return Document(
        kind=kind,
        text=found.text,
        tags=tags,
        images=found.images,
        note=found.note,
        segments=found.segments,
    )


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


def sanitized(text: str, segments: Sequence[Segment]) -> tuple[str, list[Segment]]:
    """``text`` sanitised, and its segments moved to where their text went.

    The text is always exactly what sanitising the whole gives (never less
    redacted for having segments). Each segment's slice is cleaned on its own
    and the starts recomputed from the cleaned lengths; that agrees with the
    whole unless a redaction straddles a boundary (a ``<private>`` span or a
    key block running over a page break), and then markers carried through
    the whole text's cleaning place the segments (a segment whose start was
    inside removed text is dropped: the one before it covers what is left)."""
    whole = redaction.clean(text)
    ordered = _in_range(segments, len(text))
    if not ordered:
        return whole, []
    cuts = [0, *(s.start for s in ordered), len(text)]
    pieces = [redaction.clean(text[a:b]) for a, b in pairwise(cuts)]
    if "".join(pieces) == whole:
        out, at = [], len(pieces[0])
        for segment, piece in zip(ordered, pieces[1:], strict=True):
            out.append(Segment(at, segment.where, segment.hard))
            at += len(piece)
        return whole, _in_range(out, len(whole))
    return whole, _placed_by_markers(text, ordered, whole)


def _in_range(segments: Sequence[Segment], length: int) -> list[Segment]:
    """Segments inside a text of ``length`` characters, in order; of several
    starting at one offset (those before it came out empty) the last."""
    by_start = {s.start: s for s in sorted(segments, key=lambda s: s.start) if s.start < length}
    return list(by_start.values())


def _placed_by_markers(text: str, ordered: list[Segment], whole: str) -> list[Segment]:
    mark = next((chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text), None)
    if mark is None:
        return []
    cuts = [s.start for s in ordered]
    marked = "".join(
        f"{mark}{i}{mark}" + text[a:b]
        for i, (a, b) in enumerate(zip(cuts, [*cuts[1:], len(text)], strict=True))
    )
    cleaned = redaction.clean(text[: cuts[0]] + marked)
    pattern = re.compile(f"{re.escape(mark)}([0-9]+){re.escape(mark)}")
    out: list[Segment] = []
    removed = 0
    for m in pattern.finditer(cleaned):
        segment = ordered[int(m.group(1))]
        out.append(Segment(m.start() - removed, segment.where, segment.hard))
        removed += len(m.group(0))
    if pattern.sub("", cleaned) != whole:  # a redaction swallowed a marker: no places
        return []
    return _in_range(out, len(whole))


def _clean(
    doc_text: str, segments: Sequence[Segment], tags: Mapping[str, str], enabled: bool
) -> tuple[str, list[Segment], dict[str, str]]:
    if not enabled:
        return doc_text, _in_range(segments, len(doc_text)), dict(tags)
    text, moved = sanitized(doc_text, segments)
    return text, moved, {k: redaction.clean(v) for k, v in tags.items()}


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
    segments: Sequence[Segment] = (),
) -> ItemView:
    """Put a document's text as the note's content; user tags win over found
    ones. Its segments go along, as far as the content cap keeps the text."""
    enabled = await tenants.sanitizing(session, scope)
    text, moved, found = _clean(text, segments, found_tags, enabled)
    existing = await notes.get(session, scope, note_id)
    given = dict(user_tags or {})
    kept = split_system(existing.tags)[0] if existing is not None else {}
    tags: dict[str, Any] = {k: v for k, v in found.items() if k not in given and k not in kept}
    tags.update(given)
    if placeholder is None and not text.strip():
        text, moved = f"({content_type} document with no readable text)", []
    text = text[: limits.max_content_chars]
    return await note_service.put(
        session,
        scope,
        data=note_service.PutInput(
            content=text,
            id=note_id,
            uri=uri,
            tags=tags,
            content_type=content_type,
            placeholder=placeholder,
            analyze=analyze and placeholder is None,
            segments=_in_range(moved, len(text)),
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
    segments: Sequence[Segment] = ()  # of ``text`` (what OCR appended has none)


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
        segments=doc.segments,
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
    transcribe: bool = False,
) -> ItemView:
    """A file sent to ``POST /v1/upload``: read and sanitised now; its images
    (photos, scanned pages) queued for OCR with a placeholder until then;
    audio, when ``transcribe`` (a transcriber is configured), held for its
    ``transcribe`` job the same way.

    Without an id the note's id is ``%`` and the first 12 hex digits of the
    file's sha256 (the form keep gives text put without an id): the same
    bytes sent twice are one note, two different files both called
    ``report.pdf`` are two. The file name is kept in the ``filename`` tag."""
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
    target = note_service.valid_id(note_id or "%" + hashlib.sha256(data).hexdigest()[:12])
    if doc.images:
        return await _hold(
            session, scope, note_id=target, doc=doc, user_tags=user_tags, limits=limits,
            kind=JobKind.OCR, placeholder="ocr", blobs=doc.images,
            shown=doc.text or f"{name}: {doc.kind}, text to follow (OCR)",
        )  # fmt: skip
    if transcribe and doc.kind.startswith("audio/"):
        # The metadata line now; the transcript replaces it (its own segments).
        return await _hold(
            session, scope, note_id=target, doc=replace(doc, segments=[]), user_tags=user_tags,
            limits=limits, kind=JobKind.TRANSCRIBE, placeholder="transcription", blobs=[data],
            shown=f"{doc.text}\n({name}: {doc.kind}, transcript to follow)",
            extra={"filename": name},
        )  # fmt: skip
    return await store(
        session,
        scope,
        note_id=target,
        text=doc.text,
        found_tags=doc.tags,
        user_tags=user_tags,
        content_type=doc.kind,
        limits=limits,
        segments=doc.segments,
    )


async def _hold(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    doc: Document,
    user_tags: Mapping[str, Any] | None,
    limits: Limits,
    kind: JobKind,
    placeholder: str,
    blobs: Sequence[bytes],
    shown: str,
    extra: Mapping[str, Any] | None = None,
) -> ItemView:
    """A document whose text a job delivers (OCR of its images, a transcript
    of its audio): ``shown`` as a placeholder now, the file's parts held in
    blobs until the job is done, the text read so far (sanitised) and its
    segments in the job's payload."""
    view = await store(
        session,
        scope,
        note_id=note_id,
        text=shown,
        found_tags=doc.tags,
        user_tags=user_tags,
        content_type=doc.kind,
        limits=limits,
        placeholder=placeholder,
        segments=doc.segments if doc.text else (),
    )
    enabled = await tenants.sanitizing(session, scope)
    layer, layer_segments, found = _clean(doc.text, doc.segments, doc.tags, enabled)
    job_id = await jobs.enqueue(
        session,
        scope,
        kind=kind,
        note_id=note_id,
        payload={
            "text": layer,
            "tags": found,
            "user_tags": dict(user_tags or {}),
            "content_type": doc.kind,
            "segments": spans.to_json(layer_segments),
            **(extra or {}),
        },
    )
    await repo.hold_images(session, scope, note_id, job_id, list(blobs))
    view.pending = sorted({*view.pending, kind.value})
    return view


async def held_images(session: AsyncSession, scope: Scope, *, job_id: int) -> list[bytes]:
    return await repo.held_images(session, scope, job_id)


async def release_images(session: AsyncSession, scope: Scope, *, job_id: int) -> None:
    await repo.release_images(session, scope, job_id)
