"""Batch puts: many notes in one request and one transaction.

New notes, the common case of an import, are written together: one INSERT
for the notes, one for their change-feed entries, one for their jobs. A note
that exists already, a put by URI, a put asking for analysis, and a second
put of the same id in the batch each take the single put's path, in a
savepoint of its own, so the result is what the same puts sent one by one
would give. Each note is stored or refused on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import AppError, BadRequest
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction
from app.kit.changes import EventKind
from app.kit.timeutil import utcnow
from app.notes import edges, expiry, tag_policy, texts
from app.notes import repository as repo
from app.notes.repository import changes as feed
from app.notes.views import ItemView, note_view
from app.notes.work import chunking, processing
from app.notes.writing import Fresh, PutInput, WriteArgs, checked, fresh, put_clean
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants

MAX_BATCH = 100


@dataclass(slots=True)
class BatchItem:
    """One note of a batch: the note, or why it was refused."""

    view: ItemView | None = None
    error: str | None = None
    code: str | None = None
    status: int = 200


async def put_many(
    session: AsyncSession, scope: Scope, *, items: Sequence[PutInput], limits: Limits
) -> list[BatchItem]:
    """Several puts in one transaction; a refused note (bad id, tags, size) is
    reported in its place and the others are stored."""
    if not 1 <= len(items) <= MAX_BATCH:
        raise BadRequest(f"a batch holds 1 to {MAX_BATCH} notes, not {len(items)}")
    # Expiries are checked before anything is written (a bad one refuses the batch).
    expiries = [expiry.asked(d.expires_at, d.ttl_seconds) for d in items]
    if await tenants.sanitizing(session, scope):
        items = [
            redaction.clean_fields(d, text=("content", "summary"), tags=("tags",)) for d in items
        ]
    out = [BatchItem() for _ in items]
    together: dict[str, tuple[int, WriteArgs]] = {}  # note id -> (position, put)
    alone: list[int] = []  # positions that take the single put's path, in order
    taken: set[str] = set()  # ids a single put of this batch writes, as sent
    for i, data in enumerate(items):
        if data.content is None or data.analyze:
            alone.append(i)
            taken.update(x for x in (data.id, data.uri) if x)
            continue
        try:
            args = checked(data, limits)
        except AppError as exc:
            out[i] = BatchItem(error=exc.message, code=exc.code, status=exc.status_code)
            continue
        if args.note_id in together or args.note_id in taken:
            # The same id again: after the first, as one by one.
            alone.append(i)
            taken.add(args.note_id)
        else:
            together[args.note_id] = (i, args)
    existing = await _insert_new(session, scope, together, out, limits)
    # Single puts, in the order sent: notes that existed, then the rest.
    for i in sorted(existing) + alone:
        try:
            async with session.begin_nested():
                view = await put_clean(session, scope, data=items[i], limits=limits)
                out[i] = BatchItem(view=view)
        except AppError as exc:
            out[i] = BatchItem(error=exc.message, code=exc.code, status=exc.status_code)
    for item, asked in zip(out, expiries, strict=True):
        if item.view is not None and asked is not None:
            await expiry.apply(session, scope, note_id=item.view.id, expiry=asked)
    return out


async def _insert_new(
    session: AsyncSession,
    scope: Scope,
    together: dict[str, tuple[int, WriteArgs]],
    out: list[BatchItem],
    limits: Limits,
) -> list[int]:
    """Insert the notes that do not exist yet, with their feed entries, tag
    edges and jobs; returns the positions of those that existed. The tag
    rules are those the project had when the batch began (read once)."""
    now = utcnow()
    policy = await tag_policy.policy_for(session, scope, [a.adds for _, a in together.values()])
    rows: dict[str, Fresh] = {}
    for note_id, (i, args) in together.items():
        try:
            tag_policy.check(policy, adds=args.adds, existing={})
            rows[note_id] = fresh(args, limits, now)
        except AppError as exc:
            out[i] = BatchItem(error=exc.message, code=exc.code, status=exc.status_code)
    inserted = await repo.insert_notes(
        session,
        scope,
        [(note_id, new.values, new.fts_text, new.tag_text) for note_id, new in rows.items()],
    )
    await feed.record_many(
        session, scope, mutation="doc_insert", entity_ids=list(inserted), kind=EventKind.PUT
    )
    queued: list[tuple[JobKind, str, dict[str, Any], int]] = []
    pending: dict[str, list[str]] = {}
    tagged: dict[str, dict[str, Any]] = {}
    for note_id in inserted:
        new = rows[note_id]
        if new.user_tags:
            tagged[note_id] = new.user_tags
        args = together[note_id][1]
        long = chunking(
            note_id=note_id,
            content=args.content,
            placeholder=args.placeholder,
            segments=args.segments,
            limits=limits,
        )
        kinds = processing(
            system_note=new.system_note,
            needs_summary=new.needs_summary,
            graph_extraction=limits.graph_extraction,
            chunk=long is not None,
        )
        payload: dict[str, Any] = {"content_hash": new.content_hash}
        queued += [(kind, note_id, payload, priority) for kind, priority in kinds]
        pending[note_id] = [k.value for k, _ in kinds]
        await texts.keep(
            session,
            scope,
            note_id=note_id,
            text=args.content,
            segments=args.segments,
            existed=False,
        )
    await edges.sync_new_tag_edges(session, scope, tags_by_note=tagged)
    await jobs.enqueue_new(session, scope, queued)
    for note_id, note in inserted.items():
        i = together[note_id][0]
        out[i] = BatchItem(view=note_view(note, changed=True, pending=pending[note_id]))
    return [
        i for note_id, (i, _) in together.items() if note_id in rows and note_id not in inserted
    ]
