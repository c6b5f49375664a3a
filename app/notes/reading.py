"""Reading notes: get (with ``@V{N}`` / ``@P{N}`` selectors), list, count, parts."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from app import replicas
from app.errors import BadRequest, NoteNotFound, PartNotFound, VersionNotFound
from app.jobs import repository as jobs
from app.kit import storable
from app.kit import tags as tagrules
from app.kit.ids import InvalidId, glob_regex, is_now_id, normalize_id, parse_selector
from app.kit.timeutil import keep_ts, parse_timestamp, parse_when, utcnow
from app.models import Note
from app.notes import repository as repo
from app.notes.common import tag_error, valid_id
from app.notes.views import ItemView, note_view, part_view, version_view
from app.notes.writing import create_now
from app.settings import Limits
from app.tenancy import Scope

# -- get ----------------------------------------------------------------------


async def get(session: AsyncSession, scope: Scope, *, raw_id: str) -> ItemView:
    """A note, ``ID@V{N}`` version or ``ID@P{N}`` part; the literal id wins.

    ``now`` and ``now:<scope>`` are created from the ``.now`` template on
    first read.
    """
    try:
        note_id = normalize_id(raw_id)
    except InvalidId:
        note_id = None
    if note_id is not None:
        note = await repo.get(session, scope, note_id)
        if note is None and is_now_id(note_id):
            note = await create_now(session, scope, note_id=note_id)
        if note is not None:
            now = utcnow()
            # on a read replica: run on the primary after the read
            await replicas.incidental(
                session, scope, lambda s: repo.touch_accessed(s, scope, note_id, now)
            )
            # shown, not flushed: the statement above is the write (on a
            # replica, an autoflush of the row would be refused)
            set_committed_value(note, "accessed_at", now)
            pending = await jobs.open_kinds_by_note(session, scope, [note_id])
            return note_view(note, pending=pending.get(note_id, []))
    try:
        selector = parse_selector(raw_id)
    except InvalidId as exc:
        raise BadRequest(f"invalid id: {exc}") from exc
    if selector is None:
        if note_id is None:
            raise BadRequest(f"invalid id: {raw_id!r}")
        raise NoteNotFound(f"note not found: {raw_id}")
    base = await repo.get(session, scope, selector.base_id)
    if base is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    if selector.part is not None:
        part = await repo.get_part(session, scope, selector.base_id, selector.part)
        if part is None:
            raise PartNotFound(f"part not found: {raw_id}")
        return part_view(selector.base_id, part)
    offset = selector.version or 0
    if offset == 0:
        return note_view(base)
    if offset > 0:
        version = await repo.version_at(session, scope, selector.base_id, newest_offset=offset)
    else:
        version = await repo.version_at(session, scope, selector.base_id, oldest_offset=-offset)
    if version is None:
        raise VersionNotFound(f"version not found: {raw_id}")
    total = await repo.count_versions(session, scope, selector.base_id)
    newest_offset = offset if offset > 0 else total + offset + 1
    return version_view(selector.base_id, newest_offset, version)


# -- list ---------------------------------------------------------------------

ORDER_BY = ("updated", "accessed", "created", "id")


@dataclass(frozen=True, slots=True)
class ListInput:
    prefix: str | None = None
    tags: Mapping[str, Any] | None = None
    tag_keys: Sequence[str] | None = None
    since: str | None = None
    until: str | None = None
    order_by: str = "updated"
    limit: int = 20
    offset: int = 0
    cursor: str | None = None
    include_hidden: bool = False


@dataclass(slots=True)
class ListResult:
    items: list[ItemView]
    next_cursor: str | None


def _encode_cursor(order_by: str, note: Note) -> str:
    value = note.id if order_by == "id" else getattr(note, f"{order_by}_at").isoformat()
    raw = json.dumps({"o": order_by, "v": value, "i": note.id}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, order_by: str) -> tuple[datetime | str, str]:
    try:
        raw = storable.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if raw["o"] != order_by:
            raise BadRequest("cursor was made for a different order_by")
        value: datetime | str = raw["v"] if order_by == "id" else parse_timestamp(raw["v"])
        return value, str(raw["i"])
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("invalid cursor") from exc


async def list_notes(
    session: AsyncSession, scope: Scope, *, query: ListInput, limits: Limits
) -> ListResult:
    if query.order_by not in ORDER_BY:
        raise BadRequest(f"order_by must be one of {', '.join(ORDER_BY)}")
    if not 1 <= query.limit <= limits.max_list_limit:
        raise BadRequest(f"limit must be between 1 and {limits.max_list_limit}")
    if query.offset < 0:
        raise BadRequest("offset must be >= 0")
    prefix = glob = None
    if query.prefix:
        if any(c in query.prefix for c in "*?["):
            glob = glob_regex(query.prefix)
        else:
            prefix = query.prefix
    try:
        terms = tagrules.filter_terms(query.tags, query.tag_keys)
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    include_hidden = query.include_hidden or bool(query.prefix and query.prefix.startswith("."))
    q = repo.ListQuery(
        prefix=prefix,
        glob_regex=glob,
        tag_terms=terms,
        since=parse_when(query.since) if query.since else None,
        until=parse_when(query.until) if query.until else None,
        order_by=query.order_by,
        limit=query.limit + 1,
        offset=query.offset,
        include_hidden=include_hidden,
        after=_decode_cursor(query.cursor, query.order_by) if query.cursor else None,
    )
    rows = list(await repo.list_notes(session, scope, q))
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    pending = await jobs.open_kinds_by_note(session, scope, [r.id for r in rows])
    items = [note_view(r, pending=pending.get(r.id, [])) for r in rows]
    cursor = _encode_cursor(query.order_by, rows[-1]) if more and rows else None
    return ListResult(items=items, next_cursor=cursor)


async def get_as_of(
    session: AsyncSession, scope: Scope, *, raw_id: str, as_of: datetime
) -> ItemView:
    """The note as it read at ``as_of``: the newest version written by then
    (its content and summary; tags change in place, so they are today's).
    A note made after ``as_of`` did not exist then: not found."""
    note_id = valid_id(raw_id)
    note = await repo.get(session, scope, note_id)
    if note is None or note.created_at > as_of:
        raise NoteNotFound(f"note not found at {keep_ts(as_of)}: {raw_id}")
    if note.updated_at <= as_of:
        return note_view(note)
    rows = list(await repo.list_versions(session, scope, note_id, limit=1000))
    for offset, version in enumerate(rows, start=1):
        if version.updated_at <= as_of:
            return version_view(note_id, offset, version)
    # Every state was touched after as_of (a tag change moves a note's time
    # but archives nothing): the oldest state is what it read then.
    return version_view(note_id, len(rows), rows[-1]) if rows else note_view(note)


async def exists(session: AsyncSession, scope: Scope, *, note_id: str) -> bool:
    return await repo.get(session, scope, note_id) is not None


async def count(session: AsyncSession, scope: Scope) -> int:
    return await repo.count(session, scope)


async def parts(session: AsyncSession, scope: Scope, *, raw_id: str) -> list[ItemView]:
    note_id = valid_id(raw_id)
    if await repo.get(session, scope, note_id) is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    return [part_view(note_id, p) for p in await repo.list_parts(session, scope, note_id)]


async def family(session: AsyncSession, scope: Scope, *, note_id: str) -> list[ItemView]:
    """A note and the notes under ``<id>/`` (keep's docs and their fragments)."""
    return [note_view(n) for n in await repo.family(session, scope, valid_id(note_id))]


async def sharing(
    session: AsyncSession, scope: Scope, *, terms: Sequence[str], exclude: str, limit: int
) -> list[ItemView]:
    """Visible notes holding one of these ``key=value`` tag terms, newest first."""
    if not terms:
        return []
    found = await repo.sharing_tags(session, scope, terms=terms, exclude=exclude, limit=limit)
    return [note_view(n) for n in found]
