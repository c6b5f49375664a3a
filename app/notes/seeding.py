"""Seeding a project with keep's schema docs (``system_docs``)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.changes import EventKind
from app.kit.timeutil import utcnow
from app.notes import edges
from app.notes import repository as repo
from app.notes.repository import changes as feed
from app.notes.system_docs import bundled, system_tags
from app.notes.writing import fresh, text_args
from app.settings import Limits
from app.tenancy import Scope


def system_doc_ids() -> list[str]:
    """The ids of keep's bundled schema docs."""
    return [doc.id for doc in bundled()]


async def seed_system_docs(session: AsyncSession, scope: Scope, *, backfill: bool = False) -> int:
    """Write keep's bundled schema docs into a project, in one statement; a
    doc the project already has is left as the project made it. Returns how
    many were written. ``backfill`` (a project that has notes): the notes
    holding a tag that became an edge tag get its edges in the background."""
    now, limits = utcnow(), Limits()
    rows = []
    for doc in bundled():
        new = fresh(text_args(doc.id, doc.body, doc.tags), limits, now)
        new.values["tags"] = {**new.values["tags"], **system_tags(doc.tags)}
        rows.append((doc.id, new.values, new.fts_text, new.tag_text))
    inserted = await repo.insert_notes(session, scope, rows)
    await feed.record_many(
        session, scope, mutation="doc_insert", entity_ids=list(inserted), kind=EventKind.PUT
    )
    for note_id, note in inserted.items() if backfill else ():
        await edges.inverse_changed(session, scope, note_id=note_id, before={}, after=note.tags)
    return len(inserted)
