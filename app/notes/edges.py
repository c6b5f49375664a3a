"""Tag edges, owned by the notes domain: edge tags become edges
(KEEP_PROTOCOL §6.5), which deep find and graph walks follow. Provenance
edges (``derived_from``, end of this module) are kept beside them.

A tag key is an edge tag when its ``.tag/<key>`` doc carries ``_inverse``
(``speaker`` → ``said``): each value names another note, canonicalised from
``[[target|label]]``, ``target[[label]]`` or ``[Title](https://…)``. The
edge (note, key, target) is stored and a missing target is created as an
empty stub note (``_source: auto-vivify``), as keep does, so that it can be
walked and filled in later. Stubs have no text to search, so they never
crowd find's results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit.changes import EventKind
from app.kit.ids import InvalidId, is_system_id, normalize_id
from app.kit.timeutil import utcnow
from app.notes import repository as repo
from app.notes.repository import changes as feed
from app.notes.repository import edges as edges_repo
from app.tenancy import Scope

_WIKI = re.compile(r"^\[\[([^\]|]+)(?:\|[^\]]*)?\]\]$")
_LABEL_AFTER = re.compile(r"^(.+?)\[\[[^\]]*\]\]$")
_MARKDOWN = re.compile(r"^\[[^\]]*\]\((https?://[^)\s]+)\)$")

STUB_SOURCE = "auto-vivify"
INVERSE = "_inverse"


def edge_target(value: str) -> str | None:
    """The note id an edge-tag value names, or None if it names none."""
    value = value.strip()
    for pattern in (_WIKI, _MARKDOWN, _LABEL_AFTER):
        m = pattern.match(value)
        if m:
            value = m.group(1).strip()
            break
    try:
        return normalize_id(value) if value else None
    except InvalidId:
        return None


async def sync_tag_edges(
    session: AsyncSession, scope: Scope, *, note_id: str, user_tags: Mapping[str, Any]
) -> list[str]:
    """Make the note's tag edges match its tags; returns the stubs created."""
    if is_system_id(note_id):
        return []
    verbs = await edges_repo.inverse_verbs(session, scope, user_tags.keys())
    edges = _edges_of(note_id, user_tags, verbs)
    await edges_repo.replace_from(session, scope, note_id, edges)
    return await _vivify(session, scope, sorted({t for _, t in edges}))


def _edges_of(
    note_id: str, user_tags: Mapping[str, Any], verbs: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(tag key, target note) of the note's edge tags."""
    edges: list[tuple[str, str]] = []
    for key in sorted(verbs.keys() & user_tags.keys()):
        raw = user_tags[key]
        for value in raw if isinstance(raw, list) else [raw]:
            target = edge_target(str(value))
            if target and target != note_id and not is_system_id(target):
                edges.append((key, target))
    return edges


async def sync_new_tag_edges(
    session: AsyncSession, scope: Scope, *, tags_by_note: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """``sync_tag_edges`` for notes just made (no edges yet), many at once:
    which tag keys are edge tags is asked once."""
    keys = {k for tags in tags_by_note.values() for k in tags}
    verbs = await edges_repo.inverse_verbs(session, scope, sorted(keys)) if keys else {}
    if not verbs:
        return []
    targets: set[str] = set()
    for note_id, user_tags in tags_by_note.items():
        if is_system_id(note_id):
            continue
        found = _edges_of(note_id, user_tags, verbs)
        if found:
            await edges_repo.replace_from(session, scope, note_id, found)
            targets.update(t for _, t in found)
    return await _vivify(session, scope, sorted(targets))


async def _vivify(session: AsyncSession, scope: Scope, targets: Sequence[str]) -> list[str]:
    now = utcnow()
    created = []
    for target in targets:
        stub = await repo.insert_note(
            session,
            scope,
            note_id=target,
            values={
                "summary": "",
                "tags": {"_source": STUB_SOURCE},
                "tag_index": [],
                "content_hash": None,
                "source": STUB_SOURCE,
                "created_at": now,
                "updated_at": now,
                "accessed_at": now,
            },
            fts_text="",
            tag_text="",
        )
        if stub is not None:
            created.append(target)
            await feed.record(
                session, scope, mutation="doc_insert", entity_id=target, kind=EventKind.PUT
            )
    return created


BACKFILL_BATCH = 500


async def inverse_changed(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> None:
    """A ``.tag/<key>`` note whose ``_inverse`` changed: the notes holding
    ``key`` get (or lose) their edges in the background, as keep backfills."""
    key = note_id.removeprefix(".tag/")
    if not note_id.startswith(".tag/") or not key or "/" in key:
        return
    if before.get(INVERSE) == after.get(INVERSE):
        return
    await queue_backfill(session, scope, tag_doc=note_id, key=key, after="")


async def queue_backfill(
    session: AsyncSession, scope: Scope, *, tag_doc: str, key: str, after: str
) -> None:
    await jobs.enqueue(
        session,
        scope,
        kind=JobKind.EDGE_BACKFILL,
        note_id=tag_doc,
        payload={"key": key, "after": after},
        priority=jobs.BACKGROUND_PRIORITY,
    )


async def backfill(
    session: AsyncSession, scope: Scope, *, key: str, after: str
) -> tuple[int, str | None]:
    """Re-make the tag edges of a batch of the notes holding ``key`` (after
    ``after`` in id order): (notes done, where the next batch starts, or
    None when none remain)."""
    found = await repo.holding_key(session, scope, key=key, after=after, limit=BACKFILL_BATCH)
    for note_id, tags in found:
        user = {k: v for k, v in tags.items() if not k.startswith("_")}
        await sync_tag_edges(session, scope, note_id=note_id, user_tags=user)
    more = len(found) == BACKFILL_BATCH
    return len(found), found[-1][0] if more else None


async def forget_note(session: AsyncSession, scope: Scope, *, note_id: str) -> None:
    """A deleted note's own edges go; edges pointing at it stay (its stub may return)."""
    await edges_repo.delete_from(session, scope, note_id)


# -- provenance: what a distilled memory was derived from ----------------------------

DERIVED_FROM = "derived_from"
PROVENANCE = "provenance"  # the origin of provenance edges (a tag sync leaves them)
MAX_PROVENANCE = 1000  # edges read per note


async def add_provenance(
    session: AsyncSession, scope: Scope, *, note_id: str, targets: Sequence[str]
) -> None:
    """``derived_from`` edges from the note to each target (a note id, or a
    part id ``ID@P{N}``), added to those it has. They are not tag edges:
    changing the note's tags leaves them; deleting the note removes them."""
    unique = list(dict.fromkeys(t for t in targets if t != note_id))
    await edges_repo.add_edges(
        session, scope, note_id, [(DERIVED_FROM, t) for t in unique], origin=PROVENANCE
    )


async def provenance_of(session: AsyncSession, scope: Scope, *, note_id: str) -> list[str]:
    """The targets of the note's ``derived_from`` edges, in id order."""
    return await edges_repo.targets_from(
        session, scope, note_id, predicate=DERIVED_FROM, origin=PROVENANCE, limit=MAX_PROVENANCE
    )


async def derived_into(
    session: AsyncSession, scope: Scope, *, note_id: str, parts: bool, limit: int
) -> list[tuple[str, str, str, datetime]]:
    """Notes derived from this one (with ``parts``, from any of its parts):
    (source id, target id, source summary, source updated_at), newest first."""
    return await edges_repo.sources_into(
        session,
        scope,
        note_id,
        predicate=DERIVED_FROM,
        origin=PROVENANCE,
        parts=parts,
        limit=limit,
    )
