"""A note's history: delete or revert, move versions into another note, list versions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound
from app.jobs import outbox
from app.kit import tags as tagrules
from app.kit.changes import EventKind
from app.kit.ids import NOW_ID, is_now_id, is_part_id
from app.kit.timeutil import keep_ts, utcnow
from app.models import Note, NoteVersion
from app.notes import edges
from app.notes import repository as repo
from app.notes.common import tag_error, valid_id
from app.notes.repository import changes as feed
from app.notes.repository import vectors
from app.notes.views import ItemView, note_view, split_system, version_view
from app.notes.writing import create_now
from app.tenancy import Scope

# -- delete / revert ----------------------------------------------------------


@dataclass(slots=True)
class DeleteResult:
    deleted: str
    reverted: bool
    item: ItemView | None


async def delete(
    session: AsyncSession, scope: Scope, *, raw_id: str, delete_versions: bool = True
) -> DeleteResult:
    """Delete a note with its history, or revert it to its previous version.

    Reverting a note that has no history deletes it.
    """
    note_id = valid_id(raw_id)
    if is_part_id(note_id):
        raise BadRequest(f"cannot delete a part ({raw_id}): delete or re-analyze its note")
    note = await repo.get(session, scope, note_id, lock=True)
    if note is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    if not delete_versions:
        previous = await repo.version_at(session, scope, note_id, newest_offset=1)
        if previous is not None:
            restored = await repo.update_note(
                session,
                scope,
                note_id,
                values={
                    "summary": previous.summary,
                    "tags": previous.tags,
                    "tag_index": tagrules.index_terms(previous.tags),
                    "content_hash": previous.content_hash,
                    "updated_at": utcnow(),
                    "pending_content": None,
                    "fts": previous.fts,
                },
            )
            await vectors.restore_version_vectors(session, scope, note_id, previous.version)
            await repo.delete_versions(session, scope, note_id, [previous.version])
            await repo.delete_parts(session, scope, note_id)
            await vectors.delete_for_note(session, scope, note_id, kind="part")
            await outbox.cancel_for_note(session, scope, note_id=note_id)
            await feed.record(
                session, scope, mutation="version_delete", entity_id=note_id, kind=None
            )
            await feed.record(
                session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.REVERT
            )
            await edges.sync_tag_edges(
                session, scope, note_id=note_id, user_tags=split_system(previous.tags)[0]
            )
            return DeleteResult(deleted=note_id, reverted=True, item=note_view(restored))
    await outbox.cancel_for_note(session, scope, note_id=note_id)
    await repo.delete_note(session, scope, note_id)
    await edges.forget_note(session, scope, note_id=note_id)
    await feed.record(
        session,
        scope,
        mutation="doc_delete",
        entity_id=note_id,
        kind=EventKind.DELETE,
        # What it was, for watchers (the note is gone when they look).
        payload={"summary": note.summary[:500], "tags": split_system(note.tags)[0]},
    )
    return DeleteResult(deleted=note_id, reverted=False, item=None)


# -- move -----------------------------------------------------------------------


async def move(
    session: AsyncSession,
    scope: Scope,
    *,
    name: str,
    source: str = NOW_ID,
    tags: Mapping[str, Any] | None = None,
    only_current: bool = False,
) -> ItemView:
    """Extract versions of ``source`` (all, tag-matching, or only the current)
    into the note ``name``; an existing target keeps its history underneath.

    The source keeps what did not match; emptied, it is deleted (``now`` is
    reset to its template instead).
    """
    target_id, source_id, wanted = _move_ids(name=name, source=source, tags=tags)
    src = await repo.get(session, scope, source_id, lock=True, fts=True)
    if src is None:
        raise NoteNotFound(f"source note not found: {source}")
    chosen = await _choose(session, scope, source_id, src, wanted, only_current=only_current)
    now = utcnow()
    await _write_target(session, scope, target_id, source_id, src, chosen, now=now)
    await _trim_source(session, scope, source_id, chosen, only_current=only_current, now=now)
    moved = await _sync_edges(session, scope, target_id=target_id, source_id=source_id)
    return note_view(moved, changed=True)


# -- move's steps, in order -----------------------------------------------------


def _move_ids(
    *, name: str, source: str, tags: Mapping[str, Any] | None
) -> tuple[str, str, dict[str, list[str]]]:
    """The target's and the source's ids, checked, and the tag filter."""
    if not name:
        raise BadRequest("name cannot be empty")
    target_id = valid_id(name, "name")
    source_id = valid_id(source, "source")
    if is_part_id(target_id):
        raise BadRequest(f"cannot move to a part id {target_id!r}")
    if target_id == source_id:
        raise BadRequest("source and name are the same note")
    try:
        wanted = tagrules.parse_value_map(tags)
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    return target_id, source_id, wanted


@dataclass(frozen=True, slots=True)
class _Chosen:
    """The versions a move takes from its source."""

    history: list[NoteVersion]  # the source's archived versions (none with only_current)
    moved: list[NoteVersion]  # those of them that match the filter, oldest first
    current: bool  # whether the source's current version matches too


async def _choose(
    session: AsyncSession,
    scope: Scope,
    source_id: str,
    src: Note,
    wanted: dict[str, list[str]],
    *,
    only_current: bool,
) -> _Chosen:
    """The source's versions that match the tag filter (at least one must)."""
    history = [] if only_current else list(await repo.all_versions(session, scope, source_id))
    moved = [v for v in history if tagrules.matches(v.tags, wanted)]
    current = tagrules.matches(src.tags, wanted)
    if not moved and not current:
        raise BadRequest("no versions of the source match the tag filter")
    return _Chosen(history=history, moved=moved, current=current)


def _entry(row: Note | NoteVersion) -> dict[str, Any]:
    """A version's values as the target's history stores them."""
    return {
        "summary": row.summary,
        "tags": row.tags,
        "content_hash": row.content_hash,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "fts": row.fts,
    }


async def _write_target(
    session: AsyncSession,
    scope: Scope,
    target_id: str,
    source_id: str,
    src: Note,
    chosen: _Chosen,
    *,
    now: datetime,
) -> None:
    """The newest chosen version becomes the target's current one (an existing
    target's current is archived first); the others are numbered on top of the
    target's history."""
    entries = [_entry(v) for v in chosen.moved]
    if chosen.current:
        entries.append(_entry(src))
    head = entries.pop()
    target = await repo.get(session, scope, target_id, lock=True)
    if target is not None:
        archived = await repo.archive_current(session, scope, target_id)
        await vectors.archive_note_vectors(session, scope, target_id, archived)
    base_version = await repo.max_version(session, scope, target_id) + 1 if target else 1
    head_values = _head_values(head, source_id, src, now=now)
    if target is None:
        await repo.insert_note(
            session,
            scope,
            note_id=target_id,
            values={**head_values, "created_at": head["created_at"]},
            fts_text="",
            tag_text="",
        )
        await feed.record(
            session, scope, mutation="doc_insert", entity_id=target_id, kind=EventKind.MOVE
        )
    else:
        await repo.update_note(session, scope, target_id, values=head_values)
        await feed.record(
            session, scope, mutation="doc_update", entity_id=target_id, kind=EventKind.MOVE
        )
    await repo.insert_versions(
        session,
        scope,
        target_id,
        [{**e, "version": base_version + i} for i, e in enumerate(entries)],
    )


def _head_values(
    head: dict[str, Any], source_id: str, src: Note, *, now: datetime
) -> dict[str, Any]:
    """The target's current values from the newest moved version, marked with
    where and when it was saved from."""
    head_tags = {**head["tags"], "_saved_from": source_id, "_saved_at": keep_ts(now)}
    head_user, _ = split_system(head_tags)
    return {
        "summary": head["summary"],
        "tags": head_tags,
        "tag_index": tagrules.index_terms(head_user),
        "content_hash": head["content_hash"],
        "content_type": src.content_type,
        "source": src.source,
        "updated_at": now,
        "accessed_at": now,
        "pending_content": None,
        "fts": head["fts"],
    }


async def _trim_source(
    session: AsyncSession,
    scope: Scope,
    source_id: str,
    chosen: _Chosen,
    *,
    only_current: bool,
    now: datetime,
) -> None:
    """What is left of the source: the moved versions go; when its current
    one moved, its newest remaining version is restored, or (none left) the
    note is deleted (``now`` is recreated from its template)."""
    moved_numbers = [v.version for v in chosen.moved]
    await repo.delete_versions(session, scope, source_id, moved_numbers)
    await vectors.delete_versions(session, scope, source_id, moved_numbers)
    if not chosen.current:
        return
    remaining = [v for v in chosen.history if v not in chosen.moved]
    if only_current:
        remaining = list(await repo.all_versions(session, scope, source_id))
    if remaining:
        newest = remaining[-1]
        await repo.update_note(
            session,
            scope,
            source_id,
            values={
                "summary": newest.summary,
                "tags": newest.tags,
                "tag_index": tagrules.index_terms(split_system(newest.tags)[0]),
                "content_hash": newest.content_hash,
                "updated_at": now,
                "pending_content": None,
                "fts": newest.fts,
            },
        )
        await repo.delete_versions(session, scope, source_id, [newest.version])
        # The restored version's vector becomes the note's (or none: reindexed later).
        await vectors.restore_version_vectors(session, scope, source_id, newest.version)
    else:
        await outbox.cancel_for_note(session, scope, note_id=source_id)
        await repo.delete_note(session, scope, source_id)
        if is_now_id(source_id):
            await create_now(session, scope, note_id=source_id)
    await feed.record(
        session, scope, mutation="doc_update", entity_id=source_id, kind=EventKind.MOVE
    )


async def _sync_edges(
    session: AsyncSession, scope: Scope, *, target_id: str, source_id: str
) -> Note:
    """Both notes' tag edges as they now stand (the source's gone if it is);
    the target as moved."""
    moved = await repo.get(session, scope, target_id)
    assert moved is not None
    await edges.sync_tag_edges(
        session, scope, note_id=target_id, user_tags=split_system(moved.tags)[0]
    )
    left = await repo.get(session, scope, source_id)
    if left is None:
        await edges.forget_note(session, scope, note_id=source_id)
    else:
        await edges.sync_tag_edges(
            session, scope, note_id=source_id, user_tags=split_system(left.tags)[0]
        )
    return moved


# -- versions and parts -------------------------------------------------------------


@dataclass(slots=True)
class VersionEntry:
    offset: int
    summary: str
    date: str
    tags: dict[str, Any]


async def versions(
    session: AsyncSession, scope: Scope, *, raw_id: str, limit: int, offset: int = 0
) -> tuple[list[VersionEntry], int]:
    """Archived versions newest first; offset 1 is the previous version."""
    note_id = valid_id(raw_id)
    if not 1 <= limit <= 1000 or offset < 0:
        raise BadRequest("limit must be 1-1000 and offset >= 0")
    if await repo.get(session, scope, note_id) is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    rows = await repo.list_versions(session, scope, note_id, limit=limit, offset=offset)
    total = await repo.count_versions(session, scope, note_id)
    entries = [
        VersionEntry(
            offset=offset + i + 1,
            summary=v.summary,
            date=keep_ts(v.updated_at),
            tags=version_view(note_id, offset + i + 1, v).tags,
        )
        for i, v in enumerate(rows)
    ]
    return entries, total
