"""keep's export formats (KEEP_PROTOCOL §3.5): a project as ``keep-export``
documents (ndjson stream or one JSON envelope), one note as a bundle with its
incoming edges, and the change feed as ``keep-export-changes`` pages.

The stream reads the project a page at a time, each page in its own
transaction bound to the caller's scope, so an export of any size holds
neither a transaction nor the whole project in memory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.db import Database
from app.errors import NoteNotFound
from app.kit import cursors
from app.kit.timeutil import keep_ts, utcnow
from app.models import Change, Note, NoteVersion, Part
from app.notes import repository as notes
from app.notes.common import valid_id
from app.notes.repository import changes as feed
from app.notes.repository import edges
from app.tenancy import Scope

FORMAT, VERSION = "keep-export", 3
PAGE = 500
MAX_CHANGES = 10_000


def _version(v: NoteVersion) -> dict[str, Any]:
    return {
        "version": v.version,
        "summary": v.summary,
        "tags": v.tags,
        "content_hash": (v.content_hash or "")[:10],
        "created_at": keep_ts(v.created_at),
        "updated_at": keep_ts(v.updated_at),
    }


def _part(p: Part) -> dict[str, Any]:
    return {
        "part_num": p.part_num,
        "summary": p.summary,
        "tags": p.tags,
        "created_at": keep_ts(p.created_at),
    }


def document(note: Note, versions: Sequence[NoteVersion], parts: Sequence[Part]) -> dict[str, Any]:
    return {
        "id": note.id,
        "summary": note.summary,
        "tags": note.tags,
        "content_hash": (note.content_hash or "")[:10],
        "content_hash_full": note.content_hash or "",
        "created_at": keep_ts(note.created_at),
        "updated_at": keep_ts(note.updated_at),
        "accessed_at": keep_ts(note.accessed_at),
        "versions": [_version(v) for v in versions],
        "parts": [_part(p) for p in parts],
    }


async def header(session: AsyncSession, scope: Scope, *, include_system: bool) -> dict[str, Any]:
    documents = await notes.count(session, scope, include_hidden=include_system)
    versions, parts = await notes.count_history(session, scope, include_hidden=include_system)
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": keep_ts(utcnow()),
        "store_info": {
            "document_count": documents,
            "version_count": versions,
            "part_count": parts,
            "collection": scope.project_slug,
        },
    }


async def documents(
    db: Database, scope: Scope, *, include_system: bool
) -> AsyncIterator[dict[str, Any]]:
    """Every note of the project with its versions and parts, by id."""
    after = ""
    while True:
        async with tenancy.transaction(db, scope) as session:
            query = notes.ListQuery(
                order_by="id",
                limit=PAGE,
                include_hidden=include_system,
                after=("", after) if after else None,
            )
            page = list(await notes.list_notes(session, scope, query))
            ids = [n.id for n in page]
            versions = await notes.versions_of_many(session, scope, ids)
            parts = await notes.parts_of_many(session, scope, ids)
        for note in page:
            yield document(note, versions.get(note.id, []), parts.get(note.id, []))
        if len(page) < PAGE:
            return
        after = page[-1].id


async def ndjson(db: Database, scope: Scope, *, include_system: bool) -> AsyncIterator[bytes]:
    async with tenancy.transaction(db, scope) as session:
        head = await header(session, scope, include_system=include_system)
    yield (json.dumps(head) + "\n").encode()
    async for doc in documents(db, scope, include_system=include_system):
        yield (json.dumps(doc, default=str) + "\n").encode()


async def envelope(db: Database, scope: Scope, *, include_system: bool) -> dict[str, Any]:
    async with tenancy.transaction(db, scope) as session:
        out = await header(session, scope, include_system=include_system)
    out["documents"] = [d async for d in documents(db, scope, include_system=include_system)]
    return out


async def bundle(
    session: AsyncSession,
    scope: Scope,
    *,
    raw_id: str,
    include_parts: bool,
    include_versions: bool,
) -> dict[str, Any]:
    """One note for keep's markdown export: the document, and the edges that
    point at it (``[predicate, source id]``)."""
    note_id = valid_id(raw_id)
    note = await notes.get(session, scope, note_id)
    if note is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    versions = (await notes.versions_of_many(session, scope, [note_id])).get(note_id, [])
    parts = (await notes.parts_of_many(session, scope, [note_id])).get(note_id, [])
    incoming = await edges.edges_into(session, scope, note_id, limit=1000)
    keys = await edges.inverse_verbs(session, scope, {p for _, p, _, _ in incoming})
    return {
        "document": document(
            note, versions if include_versions else [], parts if include_parts else []
        ),
        "current_inverse": [[keys.get(p, p), source] for source, p, _, _ in incoming],
        "version_inverse": [],
        "edge_tag_keys": sorted(keys),
    }


async def changes(
    session: AsyncSession, scope: Scope, *, cursor: str, limit: int
) -> dict[str, Any]:
    """A page of the change feed after ``cursor``; ``limit`` 0 reads only the
    head.

    A cursor is the public id of the last change seen (``"0"``: from the
    start), looked up in the caller's project to recover its place in the
    feed; the feed's order (its internal ids) is never shown. Text that is
    no cursor is a 400. A well-formed cursor naming no change of the project
    (its project was erased and made again, it is another project's, or it
    is a number saved before cursors were ids) has lost its place: the
    answer says ``compacted`` with no events and the head as the next
    cursor, which keep's client reads as "rebuild the mirror, then follow
    from the head" (§3.5)."""
    wanted = cursors.parse_feed(cursor)
    head = await feed.newest(session, scope)
    head_cursor = cursors.show(head) if head is not None else cursors.START
    after = 0 if wanted is None else await feed.position(session, scope, wanted)
    if after is None:
        return _changes_page(scope, cursor=head_cursor, head=head_cursor, compacted=True)
    events = await feed.after(session, scope, cursor=after, limit=limit) if limit > 0 else []
    if events:
        next_cursor = cursors.show(events[-1].public_id)
    elif limit == 0:
        next_cursor = head_cursor
    else:
        next_cursor = cursors.START if wanted is None else cursors.show(wanted)
    return _changes_page(scope, cursor=next_cursor, head=head_cursor, events=events)


def _changes_page(
    scope: Scope,
    *,
    cursor: str,
    head: str,
    events: Sequence[Change] = (),
    compacted: bool = False,
) -> dict[str, Any]:
    return {
        "format": "keep-export-changes",
        "version": 1,
        "cursor": cursor,
        "head_cursor": head,
        "compacted": compacted,
        "truncated": False,  # the feed is never pruned: nothing was left out
        "events": [
            {
                "outbox_id": cursors.show(e.public_id),
                "mutation": e.mutation,
                "entity_id": e.entity_id,
                "collection": scope.project_slug,
                "payload_json": json.dumps(e.payload or {}),
                "created_at": keep_ts(e.created_at),
                "affected_note_ids": [e.entity_id],
            }
            for e in events
        ],
    }
