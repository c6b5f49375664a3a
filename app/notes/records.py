"""keep's document-store writes as note use cases (the ``keepmem`` storage
backend for a local keep, ``app/keepstore``).

keep's own store is a record store: keep decides a note's summary, tags and
content hash itself and asks the store to keep exactly that record, archiving
the current one as a version first. These functions do that on keepmem's
notes with everything any other write of the notes domain does: the change
feed, tag edges, vectors archived with their version, and keepmem's own
background work (embedding with keepmem's model, graph extraction), so the
REST API finds what a local keep wrote. keep's full text is not sent to the
store (only its summary), so the summary is what is indexed and embedded.

keep applies the project's tag rules itself (it reads the ``.tag/`` notes
through the store); the store checks them again on the records it is given
(``tag_policy.check_record``: the values a record adds), so a keep that
skips them, or writes through the store directly, cannot break them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NoteNotFound
from app.kit import tags as tagrules
from app.kit.changes import EventKind
from app.kit.ids import is_system_id
from app.kit.timeutil import utcnow
from app.models import Note, NoteVersion
from app.notes import edges, history, importing, tag_policy
from app.notes import repository as repo
from app.notes.common import sha256_hex, tag_words, valid_id
from app.notes.repository import changes as feed
from app.notes.repository import vectors
from app.notes.views import split_system
from app.notes.work import enqueue_processing
from app.notes.writing import archive_version, taken_outside_scope
from app.settings import Limits
from app.tenancy import Scope

# Tags keep computes from the record's times when it reads one: never stored.
COMPUTED_TAGS = frozenset({"_created", "_updated", "_updated_date", "_accessed", "_accessed_date"})


def stored_tags(tags: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in tags.items() if k not in COMPUTED_TAGS}


def _row(note_id: str, summary: str, tags: dict[str, Any]) -> dict[str, Any]:
    user, _ = split_system(tags)
    return {
        "summary": summary,
        "tags": tags,
        "tag_index": tagrules.index_terms(user),
        "source": str(tags.get("_source") or "inline"),
        "content_type": tags.get("_content_type"),
        "pending_content": None,
    }


async def upsert(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    summary: str,
    tags: Mapping[str, Any],
    content_hash: str | None,
    created_at: datetime | None,
    graph_extraction: bool,
    archive: bool = True,
) -> tuple[Note, bool]:
    """Store keep's record for ``note_id``: a new note, or the current one
    archived as a version and replaced. Returns the note and whether its
    content hash changed (False for a new note, as keep's store says)."""
    note_id = valid_id(note_id)
    now = utcnow()
    clean = stored_tags(tags)
    user, _ = split_system(clean)
    values = _row(note_id, summary, clean)
    text = tag_words(note_id, user)
    system = is_system_id(note_id)
    inserted = await repo.insert_note(
        session,
        scope,
        note_id=note_id,
        values={
            **values,
            "content_hash": content_hash,
            "created_at": created_at or now,
            "updated_at": now,
            "accessed_at": now,
        },
        fts_text=summary,
        tag_text=text,
    )
    if inserted is not None:
        # a refusal raises: keep's write is its own transaction, the insert goes with it
        await _obeys_rules(session, scope, note_id, clean, {})
        await feed.record(
            session, scope, mutation="doc_insert", entity_id=note_id, kind=EventKind.PUT
        )
        if user:
            await edges.sync_tag_edges(session, scope, note_id=note_id, user_tags=user)
        await _queue(session, scope, note_id, content_hash, system, graph_extraction, False)
        return inserted, False
    existing = await repo.get(session, scope, note_id, lock=True)
    if existing is None:  # the insert conflicted, so it exists: outside the tag scope
        raise taken_outside_scope(note_id)
    await _obeys_rules(session, scope, note_id, clean, existing.tags)
    if archive:
        await archive_version(session, scope, note_id=note_id)
    changed = content_hash is not None and existing.content_hash != content_hash
    note = await repo.update_note(
        session,
        scope,
        note_id,
        values={
            **values,
            "content_hash": content_hash,
            "created_at": created_at or existing.created_at,
            "updated_at": now,
            "accessed_at": now,
        },
        fts_text=summary,
        tag_text=text,
    )
    await edges.sync_tag_edges(session, scope, note_id=note_id, user_tags=user)
    if archive or existing.summary != summary or changed:
        # the note's vectors went with the archived version, or are stale:
        # keepmem's worker embeds the current text again
        await vectors.delete_for_note(session, scope, note_id, kind="note")
        await _queue(session, scope, note_id, content_hash, system, graph_extraction, True)
    await feed.record(session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.PUT)
    return note, changed


async def _obeys_rules(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    tags: Mapping[str, Any],
    old: Mapping[str, Any],
) -> None:
    """Refuse (``TagRuleBroken``) a record whose tags break the project's tag
    rules, or whose rule flags (on a ``.tag/<key>`` note) cannot be applied."""
    tag_policy.check_stored_flags(note_id, tags, old)
    user, old_user = split_system(dict(tags))[0], split_system(dict(old))[0]
    if any(user.get(k) != old_user.get(k) for k in user):
        policy = await tag_policy.load(session, scope)
        tag_policy.check_record(policy, new=user, old=old_user)


async def _queue(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    content_hash: str | None,
    system: bool,
    graph_extraction: bool,
    existed: bool,
) -> None:
    await enqueue_processing(
        session,
        scope,
        note_id=note_id,
        system_note=system,
        needs_summary=False,  # keep chose the summary
        content_hash=content_hash or "",
        existed=existed,
        graph_extraction=graph_extraction,
    )


async def set_tags(
    session: AsyncSession, scope: Scope, *, note_id: str, tags: Mapping[str, Any]
) -> bool:
    """Replace a note's tags in place (no version), as keep's store does."""
    existing = await repo.get(session, scope, note_id, lock=True)
    if existing is None:
        return False
    clean = stored_tags(tags)
    user, _ = split_system(clean)
    await _obeys_rules(session, scope, note_id, clean, existing.tags)
    await repo.update_note(
        session,
        scope,
        note_id,
        values={"tags": clean, "tag_index": tagrules.index_terms(user), "updated_at": utcnow()},
        tag_text=tag_words(note_id, user),
    )
    await edges.sync_tag_edges(session, scope, note_id=note_id, user_tags=user)
    await feed.record(session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.TAG)
    return True


async def set_summary(session: AsyncSession, scope: Scope, *, note_id: str, summary: str) -> bool:
    """Replace a note's summary in place (keep's background summary)."""
    existing = await repo.get(session, scope, note_id, lock=True)
    if existing is None:
        return False
    user, _ = split_system(existing.tags)
    await repo.update_note(
        session,
        scope,
        note_id,
        values={"summary": summary, "updated_at": utcnow()},
        fts_text=summary,
        tag_text=tag_words(note_id, user),
    )
    await feed.record(
        session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.SUMMARY
    )
    return True


async def touch(session: AsyncSession, scope: Scope, *, note_ids: Sequence[str]) -> None:
    now = utcnow()
    for note_id in dict.fromkeys(note_ids):
        await repo.touch_accessed(session, scope, note_id, now)


async def remove(session: AsyncSession, scope: Scope, *, note_id: str) -> bool:
    """Delete a note with its history. (keep's store can keep the history of
    a deleted note; keepmem's versions belong to their note, so they go too.)"""
    try:
        await history.delete(session, scope, raw_id=note_id, delete_versions=True)
    except NoteNotFound:
        return False
    return True


async def restore_latest(session: AsyncSession, scope: Scope, *, note_id: str) -> Note | None:
    """The newest archived version made current again (and taken out of the
    history); None, and nothing changed, when there is no history."""
    if await repo.count_versions(session, scope, note_id) == 0:
        return None
    await history.delete(session, scope, raw_id=note_id, delete_versions=False)
    return await repo.get(session, scope, note_id)


async def put_vector(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    kind: str,
    ref: int,
    model: str,
    vector: Sequence[float],
) -> bool:
    """Store a vector a local keep computed, under its own model's identity
    (keepmem's search uses keepmem's model only: the spaces never mix).
    False when the note is not there (a vector needs its note)."""
    note = await repo.get(session, scope, note_id)
    if note is None:
        return False
    await vectors.upsert(
        session,
        scope,
        note_id=note_id,
        kind=kind,
        model=model,
        rows=[(ref, note.content_hash or "", vector)],
    )
    return True


async def drop_vectors(
    session: AsyncSession, scope: Scope, *, note_id: str, model: str, kind: str | None = None
) -> int:
    return await vectors.delete_of_model(session, scope, note_id, model=model, kind=kind)


async def drop_parts(session: AsyncSession, scope: Scope, *, note_id: str) -> int:
    """Delete a note's parts and their vectors."""
    await vectors.delete_for_note(session, scope, note_id, kind="part")
    dropped = await repo.delete_parts(session, scope, note_id)
    if dropped:
        await feed.record(session, scope, mutation="part_delete", entity_id=note_id, kind=None)
    return dropped


@dataclass(frozen=True, slots=True)
class Extracted:
    versions: list[NoteVersion | Note]  # oldest first; a Note is the source's current state
    source: Note | None  # the source afterwards (None: deleted)
    base_version: int  # the target's first version number for what was moved


async def extract(
    session: AsyncSession,
    scope: Scope,
    *,
    source_id: str,
    target_id: str,
    tags: Mapping[str, Any] | None,
    only_current: bool,
) -> Extracted:
    """keep's ``extract_versions``: keepmem's move (the notes domain's rules),
    reported the way keep's store reports it."""
    source = await repo.get(session, scope, source_id)
    if source is None:
        raise NoteNotFound(f"source note not found: {source_id}")
    history_rows = list(await repo.all_versions(session, scope, source_id))
    wanted = tagrules.parse_value_map(tags) if tags else {}
    picked: list[NoteVersion | Note] = []
    if not only_current:
        picked = [v for v in history_rows if not wanted or tagrules.matches(v.tags, wanted)]
    if only_current or not wanted or tagrules.matches(source.tags, wanted):
        picked.append(source)
    target_before = await repo.get(session, scope, target_id)
    base = 1 if target_before is None else await repo.max_version(session, scope, target_id) + 2
    await history.move(
        session, scope, name=target_id, source=source_id, tags=tags, only_current=only_current
    )
    return Extracted(
        versions=picked, source=await repo.get(session, scope, source_id), base_version=base
    )


async def import_batch(
    session: AsyncSession, scope: Scope, *, documents: Sequence[Mapping[str, Any]], limits: Limits
) -> dict[str, int]:
    """keep's bulk restore: documents in keep's export shape (versions and
    parts inline), written as keepmem's import writes them."""
    done = await importing.import_documents(
        session, scope, documents=documents, mode="merge", limits=limits
    )
    return {"documents": done.imported, "versions": done.versions, "parts": done.parts}


PartRow = tuple[int, str, Mapping[str, Any]]  # part number, summary, tags


async def put_parts(
    session: AsyncSession, scope: Scope, *, note_id: str, parts: Sequence[PartRow], replace: bool
) -> int:
    """keep's parts of a note (made by keep's own analysis): all of them
    (``replace``), or these ones over the ones with the same numbers. Parts
    are indexed by their summaries (keep sends no part text); their vectors
    are dropped with them (only the replaced ones' unless ``replace``).
    Returns how many parts the note has."""
    if await repo.get(session, scope, note_id) is None:
        return 0
    existing = [] if replace else list(await repo.list_parts(session, scope, note_id))
    new = {n: (n, summary, dict(tags)) for n, summary, tags in parts}
    kept = [(p.part_num, p.summary, dict(p.tags or {})) for p in existing if p.part_num not in new]
    rows = sorted([*kept, *new.values()])
    if replace:
        await vectors.delete_for_note(session, scope, note_id, kind="part")
    else:  # the other parts keep their vectors
        await vectors.delete_part_vectors(session, scope, note_id, list(new))
    await repo.delete_parts(session, scope, note_id)
    await repo.insert_parts(
        session, scope, note_id, [(n, s, t, sha256_hex(s), s) for n, s, t in rows]
    )
    await feed.record(
        session, scope, mutation="part_insert", entity_id=note_id, kind=EventKind.PARTS
    )
    return len(rows)


async def set_part_tags(
    session: AsyncSession, scope: Scope, *, note_id: str, part_num: int, tags: Mapping[str, Any]
) -> bool:
    part = await repo.get_part(session, scope, note_id, part_num)
    if part is None:
        return False
    await put_parts(
        session, scope, note_id=note_id, parts=[(part_num, part.summary, tags)], replace=False
    )
    return True


async def copy(
    session: AsyncSession, scope: Scope, *, from_id: str, to_id: str, graph_extraction: bool
) -> Note | None:
    source = await repo.get(session, scope, from_id)
    if source is None:
        return None
    note, _ = await upsert(
        session,
        scope,
        note_id=to_id,
        summary=source.summary,
        tags=source.tags,
        content_hash=source.content_hash,
        created_at=source.created_at,
        graph_extraction=graph_extraction,
    )
    return note


async def remove_all(session: AsyncSession, scope: Scope) -> int:
    """Delete every note of the project (keep's import in ``replace`` mode)."""
    done = 0
    while True:
        batch = await repo.list_notes(
            session, scope, repo.ListQuery(order_by="id", limit=500, include_hidden=True)
        )
        if not batch:
            return done
        for note in batch:
            await history.delete(session, scope, raw_id=note.id, delete_versions=True)
            done += 1
