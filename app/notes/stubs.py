"""keep's ``stub``: a note made ahead of its content, only if the id is
free. It holds the summary given (else the content, else nothing), the tags
given and ``_source: auto-vivify``, as the stubs edge tags make; a note that
exists already is returned as it is (``changed: false``). A stub with text
is embedded like any note; an empty one has nothing to search."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NoteNotFound
from app.kit import redaction
from app.kit.ids import is_part_id
from app.kit.timeutil import utcnow
from app.notes import repository as repo
from app.notes import tag_policy
from app.notes.common import valid_id
from app.notes.edges import STUB_SOURCE
from app.notes.views import ItemView, note_view
from app.notes.writing import PutInput, after_insert, checked, fresh
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants


async def stub(
    session: AsyncSession,
    scope: Scope,
    *,
    raw_id: str,
    content: str | None = None,
    summary: str | None = None,
    tags: Mapping[str, Any] | None = None,
    created_at: str | None = None,
    limits: Limits,
) -> ItemView:
    note_id = valid_id(raw_id)
    if is_part_id(note_id):
        raise BadRequest(f"cannot stub a part id {note_id!r}: parts are made by analysis")
    existing = await repo.get(session, scope, note_id)
    if existing is not None:
        return note_view(existing, changed=False)
    text = summary if summary is not None else (content or "")
    data = PutInput(
        content=text, id=note_id, summary=text, tags=dict(tags or {}), created_at=created_at
    )
    if await tenants.sanitizing(session, scope):
        data = redaction.clean_fields(data, text=("content", "summary"), tags=("tags",))
    args = checked(data, limits)
    await tag_policy.admit(session, scope, adds=args.adds, existing={})
    new = fresh(args, limits, utcnow())
    new.values["tags"] = {**new.values["tags"], "_source": STUB_SOURCE}
    new.values["source"] = STUB_SOURCE
    inserted = await repo.insert_note(
        session,
        scope,
        note_id=note_id,
        values=new.values,
        fts_text=new.fts_text,
        tag_text=new.tag_text,
    )
    if inserted is None:  # made meanwhile by another request
        found = await repo.get(session, scope, note_id)
        if found is None:
            raise NoteNotFound(f"note not found: {raw_id}")
        return note_view(found, changed=False)
    queued = await after_insert(
        session,
        scope,
        note_id=note_id,
        user_tags=new.user_tags,
        system_note=new.system_note or not text.strip(),
        needs_summary=False,
        content_hash=new.content_hash,
        limits=limits,
    )
    return note_view(inserted, changed=True, pending=queued)
