"""Tagging a note: keep's tag command (set, remove keys, remove values), with
the note's tag edges and change feed kept in step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NoteNotFound
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction
from app.kit import tags as tagrules
from app.kit.changes import EventKind
from app.kit.timeutil import utcnow
from app.notes import edges, tag_policy
from app.notes import repository as repo
from app.notes.common import tag_error, tag_words, valid_id
from app.notes.repository import changes as feed
from app.notes.views import ItemView, note_view, split_system
from app.tenancy import Scope
from app.tenants import service as tenants


async def tag(
    session: AsyncSession,
    scope: Scope,
    *,
    raw_id: str,
    set_tags: Mapping[str, Any] | None = None,
    remove: Sequence[str] | None = None,
    remove_values: Mapping[str, Any] | None = None,
) -> ItemView:
    """Add values (``""`` removes a key), remove keys, remove single values.

    Tags change in place: no version is archived. The project's tag rules
    apply (a singular tag's new value replaces the old); on a ``.tag/<key>``
    note the rule flags themselves may be set and removed.
    """
    note_id = valid_id(raw_id)
    if set_tags and await tenants.sanitizing(session, scope):
        set_tags = redaction.clean_tags(set_tags)
    try:
        deletes, adds = tagrules.user_tag_changes(set_tags)
        deletes |= tagrules.parse_key_list(remove)
        drop_values = tagrules.parse_value_map(remove_values)
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    flags = tag_policy.flag_changes(note_id, set_tags, remove)
    note = await repo.get(session, scope, note_id, lock=True)
    if note is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    user, system = split_system(note.tags)
    replaced = await tag_policy.admit(session, scope, adds=adds, existing=user)
    try:
        new_user = tagrules.apply_changes(
            user, add=adds, remove_keys=deletes | replaced, remove_values=drop_values
        )
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    new_system = flags.apply(system)
    if flags:
        tag_policy.check_flags(note_id, tag_policy.flags_of(new_system))
    if new_user == user and new_system == system:
        return note_view(note, changed=False)
    note = await repo.update_note(
        session,
        scope,
        note_id,
        values={
            "tags": {**new_user, **new_system},
            "tag_index": tagrules.index_terms(new_user),
            "updated_at": utcnow(),
        },
        fts_text=note.pending_content,
        tag_text=tag_words(note_id, new_user),
    )
    await feed.record(session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.TAG)
    await edges.inverse_changed(session, scope, note_id=note_id, before=system, after=new_system)
    await edges.sync_tag_edges(session, scope, note_id=note_id, user_tags=new_user)
    pending: list[str] = []
    if note.pending_content is not None and note.summary != note.pending_content:
        # Summaries may depend on tags (related notes as context): redo it. The
        # current summary stays until the new one is ready.
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.SUMMARIZE,
            note_id=note_id,
            payload={"content_hash": note.content_hash},
        )
        pending.append(JobKind.SUMMARIZE.value)
    return note_view(note, changed=True, pending=pending)
