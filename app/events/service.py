"""Live changes: the change feed as events a person or a program watches.

An event is a change-feed row with a kind (``app.kit.changes``), shown with
the note as it is when the event is read (its summary and user tags; a
deleted note as it was when deleted). ``GET /v1/events`` streams them;
webhooks get them POSTed (``app.events.webhooks``). A credential with a tag
scope sees only events of notes inside its scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest
from app.kit import cursors
from app.kit import tags as tagrules
from app.kit.changes import EventKind
from app.kit.timeutil import keep_ts
from app.models import Change, Note
from app.notes import repository as notes
from app.notes.repository import changes as feed
from app.notes.views import split_system
from app.tenancy import Scope

KINDS = tuple(k.value for k in EventKind)


@dataclass(frozen=True, slots=True)
class Watch:
    """What a watcher wants: these kinds (all when empty), of notes holding
    every tag term (``key`` or ``key=value``, case-folded)."""

    kinds: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()

    def wants(self, event: Mapping[str, Any]) -> bool:
        if self.kinds and event["kind"] not in self.kinds:
            return False
        if not self.terms:
            return True
        return set(self.terms) <= set(tagrules.index_terms(event["tags"]))


def watch_of(
    kinds: Iterable[str] = (),
    tags: Mapping[str, Any] | None = None,
    tag_keys: Iterable[str] = (),
) -> Watch:
    """A Watch from what a request named (``kinds`` may be comma-separated);
    BadRequest names an unknown kind or a bad tag key."""
    wanted: list[str] = []
    for item in kinds:
        for kind in (k.strip() for k in item.split(",")):
            if not kind:
                continue
            if kind not in KINDS:
                raise BadRequest(f"unknown event kind {kind!r}: use one of {', '.join(KINDS)}")
            if kind not in wanted:
                wanted.append(kind)
    try:
        terms = tagrules.filter_terms(tags, tag_keys)
    except tagrules.InvalidTags as exc:
        raise BadRequest(f"invalid tag filter: {exc}") from exc
    return Watch(kinds=tuple(wanted), terms=tuple(sorted(set(terms))))


def _event(scope: Scope, change: Change, note: Note | None) -> dict[str, Any] | None:
    """The event of a change, or None when the reader may not see it."""
    if change.kind == EventKind.DELETE:
        summary = change.payload.get("summary")
        tags = change.payload.get("tags") or {}
    elif note is not None:
        summary, tags = note.summary, split_system(note.tags)[0]
    else:  # the note is gone (deleted since) or outside the reader's tag scope
        summary, tags = None, {}
    if scope.tag_terms and not set(scope.tag_terms) <= set(tagrules.index_terms(tags)):
        return None
    detail = {k: v for k, v in (change.payload or {}).items() if k not in ("summary", "tags")}
    return {
        "id": cursors.show(change.public_id),
        "kind": change.kind,
        "note_id": change.entity_id,
        "project": scope.project_slug,
        "at": keep_ts(change.created_at),
        "summary": summary,
        "tags": tags,
        "detail": detail,
    }


async def render(
    session: AsyncSession, scope: Scope, *, changes: Sequence[Change]
) -> list[dict[str, Any]]:
    """The events of ``changes`` the scope may see, oldest first."""
    if not changes:
        return []
    found = await notes.get_many(session, scope, sorted({c.entity_id for c in changes}))
    events = (_event(scope, c, found.get(c.entity_id)) for c in changes)
    return [e for e in events if e is not None]


async def read(
    session: AsyncSession, scope: Scope, *, cursor: int, watch: Watch, limit: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """Events after ``cursor`` the watch wants, the cursor to read from next
    (the last change looked at, wanted or not), and whether more may wait."""
    changes = await feed.after(
        session, scope, cursor=cursor, limit=limit, watched=True, kinds=watch.kinds
    )
    if not changes:
        return [], cursor, False
    events = [e for e in await render(session, scope, changes=changes) if watch.wants(e)]
    return events, changes[-1].id, len(changes) == limit


async def head(session: AsyncSession, scope: Scope) -> int:
    """The newest event's place in the feed (a stream without a cursor
    starts after it; a webhook is made there)."""
    return await feed.head(session, scope, watched=True)


async def start(session: AsyncSession, scope: Scope, *, after: str | None, name: str) -> int:
    """Where a stream resumes: after the event whose id ``after`` is (looked
    up in the caller's project; ``"0"``: the first event), or at the newest
    when ``after`` is None or blank. ``name`` is what the client sent it as,
    for the 400s: text that is no event id, or an event this project does
    not have (``cursor_expired``: the client reconnects without it)."""
    if after is None or not after.strip():
        return await head(session, scope)
    wanted = cursors.parse_feed(after, name=name)
    if wanted is None:
        return 0
    found = await feed.position(session, scope, wanted)
    if found is None:
        raise cursors.expired(
            name, after, restart="reconnect without it to follow from the newest event"
        )
    return found
