"""What background work writes into a note: a summary, vectors, parts, the
end of held content, a placeholder that gives up.

These are the only ways the pipeline, ingest and graph change note data;
each records its change-feed entry and its vector changes itself. The caller
holds the note's row lock and has checked that its work is still current.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.jobs import repository as jobs
from app.jobs.kinds import CONTENT_KINDS
from app.kit.changes import WATCH_ONLY, EventKind
from app.models import Note
from app.notes import repository as repo
from app.notes.common import PENDING_TAG
from app.notes.repository import changes as feed
from app.notes.repository import vectors
from app.tenancy import Scope


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def apply_summary(session: AsyncSession, scope: Scope, *, note: Note, summary: str) -> None:
    """The summary made for the note's current content."""
    tags = {**note.tags, "_summarized_hash": (note.content_hash or "")[:10]}
    await repo.update_note(session, scope, note.id, values={"summary": summary, "tags": tags})
    await feed.record(
        session, scope, mutation="doc_update", entity_id=note.id, kind=EventKind.SUMMARY
    )


async def apply_vectors(
    session: AsyncSession,
    scope: Scope,
    *,
    model: str,
    rows: Sequence[tuple[str, str, list[float]]],
) -> None:
    """Notes' vectors of ``model``: (note id, hash of the embedded text, vector)."""
    await vectors.upsert_notes(session, scope, model=model, rows=list(rows))
    await feed.record_many(
        session,
        scope,
        mutation=WATCH_ONLY,
        entity_ids=[note_id for note_id, _, _ in rows],
        kind=EventKind.EMBEDDING,
    )


async def announce(session: AsyncSession, scope: Scope, *, note_id: str, kind: EventKind) -> None:
    """Tell watchers (``/v1/events``, webhooks) what a note's write meant
    beyond the write itself (a checkpoint, a pattern seen again)."""
    await feed.record(session, scope, mutation=WATCH_ONLY, entity_id=note_id, kind=kind)


@dataclass(frozen=True, slots=True)
class NewPart:
    summary: str
    text: str
    vector: list[float]
    #: A passage's characters in the note's text and what they cover (pages …).
    span: tuple[int, int] | None = None
    locator: dict[str, Any] | None = None


async def replace_parts(
    session: AsyncSession,
    scope: Scope,
    *,
    note: Note,
    analyzed_text: str,
    parts: Sequence[NewPart],
    model: str,
    marker: str = "_analyzed_hash",
) -> int:
    """The note's parts (``ID@P{N}``) and their vectors, replacing earlier
    ones; ``marker`` is the system tag that records which text they are of
    (``_analyzed_hash`` for analysis, ``_chunked_hash`` for passages)."""
    await repo.delete_parts(session, scope, note.id)
    await vectors.delete_for_note(session, scope, note.id, kind="part")
    rows: list[tuple[int, str, dict[str, Any], str, str]] = [
        (i + 1, part.summary, {}, sha256(part.text), part.text) for i, part in enumerate(parts)
    ]
    where = [(*p.span, p.locator or {}) if p.span else None for p in parts]
    await repo.insert_parts(session, scope, note.id, rows, spans=where)
    await vectors.upsert(
        session,
        scope,
        note_id=note.id,
        kind="part",
        model=model,
        rows=[
            (num, text_hash, p.vector)
            for (num, _, _, text_hash, _), p in zip(rows, parts, strict=True)
        ],
    )
    tags = {**note.tags, marker: sha256(analyzed_text)[:10]}
    await repo.update_note(session, scope, note.id, values={"tags": tags})
    await feed.record(
        session,
        scope,
        mutation="part_insert",
        entity_id=note.id,
        kind=EventKind.PARTS,
        payload={"parts": len(rows)},
    )
    return len(rows)


async def release_content(
    session: AsyncSession,
    scope: Scope,
    *,
    held: Sequence[Note],
    finishing_jobs: Sequence[int],
    keep_for_context: bool,
) -> None:
    """Let go of notes' original content once no queued work needs it.

    A summarizer that uses related notes as context is re-run on tag changes,
    so with one configured (``keep_for_context``) the content stays for that
    future work. ``finishing_jobs`` are the jobs about to finish.
    """
    if keep_for_context:
        return
    held = [n for n in held if n.pending_content is not None]
    if not held:
        return
    busy = await jobs.notes_with_open_jobs(
        session, scope, [n.id for n in held], kinds=CONTENT_KINDS, excluding=finishing_jobs
    )
    free = [n.id for n in held if n.id not in busy]
    if free:
        await repo.clear_pending_content(session, scope, free)


async def give_up(session: AsyncSession, scope: Scope, *, note_id: str, reason: str) -> bool:
    """A document that will not come (fetch or OCR failed for good): the
    placeholder's summary says why instead of promising text."""
    note = await repo.get(session, scope, note_id, lock=True)
    if note is None or PENDING_TAG not in note.tags:
        return False
    kind = note.tags[PENDING_TAG]
    tags = {k: v for k, v in note.tags.items() if k != PENDING_TAG}
    summary = f"{note_id}: {kind} failed: {reason}"[:1000]
    await repo.update_note(session, scope, note_id, values={"summary": summary, "tags": tags})
    await feed.record(
        session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.FAILED
    )
    return True
