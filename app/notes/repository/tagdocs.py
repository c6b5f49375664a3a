"""A project's tag docs (``.tag/<key>`` and ``.tag/<key>/<value>`` notes),
read at once: the tag rules every write of user tags obeys
(``app/notes/tag_policy.py``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Note
from app.notes.repository._shared import in_scope
from app.tenancy import Scope

PREFIX = ".tag/"


async def tag_docs(session: AsyncSession, scope: Scope) -> dict[str, dict[str, Any]]:
    """{note id: tags} of every ``.tag/...`` note of the project, in one
    statement (ids are ``COLLATE "C"``: the prefix is a range of the key).
    System documents are visible to tag-scoped credentials too, so every
    credential of a project reads the same rules."""
    rows = await session.execute(
        select(Note.id, Note.tags).where(
            in_scope(scope), Note.id.startswith(PREFIX, autoescape=True)
        )
    )
    return {note_id: dict(tags or {}) for note_id, tags in rows}
