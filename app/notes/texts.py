"""Kept text: a note's normalised text beside it, when its project asks.

keep's default is to let a note's content go once it is summarised,
embedded and indexed: no content is kept. A project with the setting
``keep_text`` keeps each note's text as stored (sanitised, extracted from
its document) compressed with zlib, with the segments (pages, slides,
sheets, cues) it was read with. Citations quote it and verify against it;
re-chunking reads it. It is replaced when the note's content changes,
erased with the note (the row's foreign key cascades) and counted in the
tenant's stored bytes (a write past the byte quota is refused).

Whether a project keeps text is read from its settings and cached here for
a few seconds per process (a change made through this process takes effect
at once: ``forget``).
"""

from __future__ import annotations

import hashlib
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.caches import LRU
from app.kit import spans
from app.kit.ids import is_system_id
from app.kit.spans import Segment
from app.notes.repository import texts as repo
from app.tenancy import Scope
from app.tenants import service as tenants

SETTING = "keep_text"
CACHE_SECONDS = 5.0
NOT_KEPT = (
    "this project does not keep its notes' text (keep's default): turn it on with "
    'PATCH /v1/settings {"keep_text": true} and put the document again'
)

_cache: LRU[tuple[uuid.UUID, uuid.UUID], bool] = LRU(10_000, ttl=CACHE_SECONDS)


@dataclass(frozen=True, slots=True)
class KeptText:
    note_id: str
    text: str
    sha256: str
    segments: list[Segment] = field(default_factory=list)
    stored_bytes: int = 0


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def enabled(settings: Mapping[str, Any]) -> bool:
    """Whether a project's settings document says to keep text."""
    return settings.get(SETTING) is True


def forget(scope: Scope) -> None:
    """Drop the cached setting (it was just changed)."""
    key = (scope.tenant_id, scope.project_id)
    _cache.drop(lambda k: k == key)


async def keeps(session: AsyncSession, scope: Scope) -> bool:
    key = (scope.tenant_id, scope.project_id)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    value = enabled(await tenants.project_settings(session, scope))
    _cache.put(key, value)
    return value


async def keep(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    text: str,
    segments: Sequence[Segment] = (),
    existed: bool = True,
) -> None:
    """Keep (or replace) the note's text, when its project keeps text; when
    it does not, drop a text kept for older content (a note new in this
    transaction has none: no statement then)."""
    if is_system_id(note_id):
        return
    if not await keeps(session, scope):
        if existed:
            await repo.remove(session, scope, note_id)
        return
    await repo.upsert(
        session,
        scope,
        note_id=note_id,
        sha256=sha256(text),
        chars=len(text),
        data=zlib.compress(text.encode("utf-8"), 6),
        segments=spans.to_json(segments),
    )


async def keep_missing(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    text: str,
    segments: Sequence[Segment] = (),
) -> None:
    """A note put again with the same text: keep it if its project keeps text
    and none (or another) is kept, as when ``keep_text`` was turned on after
    the note was first put."""
    if is_system_id(note_id) or not await keeps(session, scope):
        return
    if await repo.sha_of(session, scope, note_id) != sha256(text):
        await keep(session, scope, note_id=note_id, text=text, segments=segments)


async def drop(session: AsyncSession, scope: Scope, note_id: str) -> None:
    """Forget a note's kept text (its content is a placeholder for now)."""
    await repo.remove(session, scope, note_id)


async def read(session: AsyncSession, scope: Scope, note_id: str) -> KeptText | None:
    """The note's kept text, or None when none is kept."""
    row = await repo.get(session, scope, note_id)
    if row is None:
        return None
    return KeptText(
        note_id=note_id,
        text=zlib.decompress(row.data).decode("utf-8"),
        sha256=row.sha256,
        segments=spans.from_json(row.segments),
        stored_bytes=len(row.data),
    )


async def kept_ids(session: AsyncSession, scope: Scope, *, after: str, limit: int) -> list[str]:
    return await repo.kept_ids(session, scope, after=after, limit=limit)


async def long_notes(
    session: AsyncSession, scope: Scope, *, min_chars: int, after: str, limit: int
) -> list[tuple[str, str | None, bool, bool]]:
    """The project's notes longer than ``min_chars``: (id, content hash,
    content held, text kept), a batch in id order after ``after``."""
    return await repo.long_notes(session, scope, min_chars=min_chars, after=after, limit=limit)
