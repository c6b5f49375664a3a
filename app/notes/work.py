"""The background work a write of a note causes: which jobs (embedding,
summary, passages, graph), queued in the write's own transaction."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import spans
from app.kit.ids import is_system_id
from app.kit.spans import Segment
from app.settings import Limits
from app.tenancy import Scope


async def enqueue_processing(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    system_note: bool,
    needs_summary: bool,
    content_hash: str,
    existed: bool = True,
    graph_extraction: bool = True,
    chunk: tuple[Segment, ...] | None = None,
) -> list[str]:
    """Outbox rows for the work a write causes, in the write's own transaction.
    ``chunk``: the note is long; the segments its text was read with."""
    kinds = processing(
        system_note=system_note,
        needs_summary=needs_summary,
        graph_extraction=graph_extraction,
        chunk=chunk is not None,
    )
    payload = {"content_hash": content_hash}
    payloads = {JobKind.CHUNK: payload | {"segments": spans.to_json(chunk or ())}}
    rows = [(k, note_id, payloads.get(k, payload), p) for k, p in kinds]
    if not existed:  # a new note has no older work to supersede: one statement
        await jobs.enqueue_new(session, scope, rows)
    for kind, _, body, priority in rows if existed else []:
        await jobs.enqueue(
            session, scope, kind=kind, note_id=note_id, payload=body, priority=priority
        )
    return [k.value for k, _ in kinds]


def chunking(
    *,
    note_id: str,
    content: str,
    placeholder: str | None,
    segments: tuple[Segment, ...],
    limits: Limits,
) -> tuple[Segment, ...] | None:
    """The segments to cut a long note's passages by; None when the note is
    short (or chunking is off, or it is a system note or a placeholder)."""
    if limits.chunk_min_chars <= 0 or len(content) <= limits.chunk_min_chars:
        return None
    if is_system_id(note_id) or placeholder is not None:
        return None
    return segments


def processing(
    *, system_note: bool, needs_summary: bool, graph_extraction: bool, chunk: bool = False
) -> list[tuple[JobKind, int]]:
    """The background work (kind, priority) a new or changed note needs."""
    if system_note:
        return []
    kinds = [(JobKind.EMBED, 5)]
    if needs_summary:
        kinds.append((JobKind.SUMMARIZE, 5))
    if chunk:
        # Its passages, in the background lane (capped in flight, per tenant
        # too): a tenant's books never hold every worker slot, and the note
        # itself is findable by meaning first.
        kinds.append((JobKind.CHUNK, jobs.BACKGROUND_PRIORITY))
    if graph_extraction:
        # Graph extraction waits behind embedding and summaries: a note is
        # findable by meaning first (measured: run at the same priority it
        # cut the embedding rate of bench/pipeline.py from 83 to 22 notes/s).
        kinds.append((JobKind.EXTRACT_GRAPH, jobs.BACKGROUND_PRIORITY))
    return kinds
