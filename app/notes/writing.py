"""Writing notes: put (text or URI), tag, system notes and ``now``, analysis
requests; every write records the change feed and queues its work in the same
transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, ContentNotHeld, NoteNotFound, OutsideScope, PayloadTooLarge
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction
from app.kit import tags as tagrules
from app.kit.changes import EventKind
from app.kit.ids import NOW_ID, content_id, is_part_id, is_system_id
from app.kit.spans import Segment
from app.kit.timeutil import parse_timestamp, utcnow
from app.models import Note
from app.notes import edges, expiry, tag_policy, texts
from app.notes import repository as repo
from app.notes.common import PENDING_TAG, sha256_hex, tag_error, tag_words, valid_id
from app.notes.repository import changes as feed
from app.notes.repository import vectors
from app.notes.system_docs import NOW_TEMPLATE
from app.notes.views import ItemView, note_view, split_system
from app.notes.work import chunking, enqueue_processing
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants

# -- put --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PutInput:
    content: str | None = None
    uri: str | None = None
    id: str | None = None
    summary: str | None = None
    tags: Mapping[str, Any] | None = None
    created_at: str | None = None
    force: bool = False
    content_type: str | None = None
    analyze: bool = False
    #: The content stands in for a document a job of this kind will deliver.
    placeholder: str | None = None
    #: When the note expires: an ISO-8601 instant, or seconds from now (0: never).
    expires_at: str | None = None
    ttl_seconds: int | None = None
    #: Where the content's characters came from (pages, slides, sheets, cues).
    segments: Sequence[Segment] = ()


@dataclass(frozen=True, slots=True)
class WriteArgs:
    """A put that passed every check, ready to write."""

    note_id: str
    content: str
    summary: str | None
    deletes: set[str]
    adds: dict[str, list[str]]
    created_override: datetime | None
    force: bool
    source: str
    content_type: str
    uri: str | None
    placeholder: str | None = None
    #: The tag-rule flags a put sets on a ``.tag/<key>`` note (tag_policy).
    flags: tag_policy.FlagChanges = tag_policy.NO_CHANGES
    segments: tuple[Segment, ...] = ()


def checked(data: PutInput, limits: Limits) -> WriteArgs:
    """The checks of a put with content (no database needed): a refusal
    raises the error the client gets."""
    content = data.content
    if content is None:
        raise BadRequest("put needs content or uri")
    if len(content) > limits.max_content_chars:
        raise PayloadTooLarge(
            f"content is {len(content)} characters; the limit is {limits.max_content_chars}"
        )
    if data.summary is not None and len(data.summary) > limits.max_summary_chars:
        raise PayloadTooLarge(
            f"summary is {len(data.summary)} characters; the limit is {limits.max_summary_chars}"
        )
    if data.id:
        note_id = valid_id(data.id)
    elif data.uri:
        note_id = valid_id(data.uri, "uri")
    else:
        if not content.strip():
            raise BadRequest("content is empty")
        note_id = content_id(content)
    if is_part_id(note_id):
        raise BadRequest(f"cannot put to a part id {note_id!r}: parts are made by analysis")
    try:
        deletes, adds = tagrules.user_tag_changes(data.tags)
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    flags = tag_policy.flag_changes(note_id, data.tags)
    created_override = None
    if data.created_at:
        try:
            created_override = parse_timestamp(data.created_at)
        except ValueError as exc:
            raise BadRequest(
                f"invalid created_at {data.created_at[:80]!r}: use ISO-8601 ({exc})"
            ) from exc
    return WriteArgs(
        note_id=note_id,
        content=content,
        summary=data.summary,
        deletes=deletes,
        adds=adds,
        created_override=created_override,
        force=data.force,
        source="uri" if data.uri else "inline",
        content_type=data.content_type or "text/markdown",
        uri=data.uri,
        placeholder=data.placeholder,
        flags=flags,
        segments=tuple(s for s in data.segments if s.start < len(content)),
    )


async def put(session: AsyncSession, scope: Scope, *, data: PutInput, limits: Limits) -> ItemView:
    """Create or update a note with keep's versioning rules.

    A content change archives the previous state as a version; the same
    content again (or only new tags) updates in place. Long content gets a
    placeholder summary and a summarize job; every user note gets an embed job.
    """
    asked = expiry.asked(data.expires_at, data.ttl_seconds)  # refused before any write
    if await tenants.sanitizing(session, scope):
        data = redaction.clean_fields(data, text=("content", "summary"), tags=("tags",))
    view = await put_clean(session, scope, data=data, limits=limits)
    if asked is not None:
        await expiry.apply(session, scope, note_id=view.id, expiry=asked)
    return view


async def put_clean(
    session: AsyncSession, scope: Scope, *, data: PutInput, limits: Limits
) -> ItemView:
    """``put`` of input already sanitised (or in a project that does not sanitise)."""
    if data.content is None and data.uri is not None:
        return await _put_by_uri(session, scope, data=data, limits=limits)
    args = checked(data, limits)
    view = await write(session, scope, args=args, limits=limits)
    note_id = args.note_id
    if data.analyze and not is_system_id(note_id):
        # Hold the content for the analysis even when it did not change.
        await repo.update_note(session, scope, note_id, values={"pending_content": args.content})
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.ANALYZE,
            note_id=note_id,
            priority=7,
            payload={"content_hash": sha256_hex(args.content)},
        )
        view.pending = sorted({*view.pending, JobKind.ANALYZE.value})
    return view


@dataclass(frozen=True, slots=True)
class Fresh:
    """What a put stores for a note that does not exist yet."""

    values: dict[str, Any]
    fts_text: str
    tag_text: str
    user_tags: dict[str, Any]
    stored_system: dict[str, Any]
    summary: str
    system_note: bool
    needs_summary: bool
    content_hash: str
    pending_content: str | None


def fresh(args: WriteArgs, limits: Limits, now: datetime) -> Fresh:
    """The row of a new note for a checked put."""
    content = args.content
    # A placeholder is neither embedded nor summarised: the real text follows.
    system_note = is_system_id(args.note_id) or args.placeholder is not None
    content_hash = sha256_hex(content)
    needs_summary = False
    summary = args.summary
    if summary is None:
        if system_note or len(content) <= limits.max_summary_length:
            summary = content
        else:
            summary = content[: limits.max_summary_length] + "..."
            needs_summary = True
    try:
        user_tags = tagrules.apply_changes({}, add=args.adds)
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    stored_system: dict[str, Any] = {
        "_source": args.source,
        "_content_type": args.content_type,
        "_content_length": str(len(content)),
    }
    if args.uri:
        stored_system["_source_uri"] = args.uri
    if args.placeholder:
        stored_system[PENDING_TAG] = args.placeholder
    if not needs_summary:
        stored_system["_summarized_hash"] = content_hash[:10]
    stored_system.update(args.flags.set)
    pending_content = content if (needs_summary or not system_note) else None
    values = {
        "summary": summary,
        "tags": {**user_tags, **stored_system},
        "tag_index": tagrules.index_terms(user_tags),
        "content_hash": content_hash,
        "content_type": args.content_type,
        "source": args.source,
        # An imported note keeps its own time: created then, unchanged since.
        "created_at": args.created_override or now,
        "updated_at": args.created_override or now,
        "accessed_at": now,
        "pending_content": pending_content,
    }
    return Fresh(
        values=values,
        fts_text=content[: limits.max_fts_chars],
        tag_text=tag_words(args.note_id, user_tags),
        user_tags=user_tags,
        stored_system=stored_system,
        summary=summary,
        system_note=system_note,
        needs_summary=needs_summary,
        content_hash=content_hash,
        pending_content=pending_content,
    )


async def write(
    session: AsyncSession, scope: Scope, *, args: WriteArgs, limits: Limits
) -> ItemView:
    """Store a checked put: insert, or update an existing note (versioning).
    The project's tag rules are checked before the insert as for a new note;
    a note that exists is checked again against its own tags."""
    policy = await tag_policy.policy_for(session, scope, [args.adds])
    tag_policy.check(policy, adds=args.adds, existing={})
    now = utcnow()
    new = fresh(args, limits, now)
    note_id, content_hash = args.note_id, new.content_hash
    # Insert first (most puts make new notes); an existing note takes the
    # update path below, under a row lock, with its tags merged.
    inserted = await repo.insert_note(
        session,
        scope,
        note_id=note_id,
        values=new.values,
        fts_text=new.fts_text,
        tag_text=new.tag_text,
    )
    if inserted is not None:
        await edges.inverse_changed(
            session, scope, note_id=note_id, before={}, after=new.values["tags"]
        )
        queued = await after_insert(
            session,
            scope,
            note_id=note_id,
            user_tags=new.user_tags,
            system_note=new.system_note,
            needs_summary=new.needs_summary,
            content_hash=content_hash,
            limits=limits,
            chunk=_long(args, limits),
        )
        await _keep_text(session, scope, args, existed=False)
        return note_view(inserted, changed=True, pending=queued)
    return await _update(session, scope, args, new, limits=limits, now=now, policy=policy)


async def _update(
    session: AsyncSession,
    scope: Scope,
    args: WriteArgs,
    new: Fresh,
    *,
    limits: Limits,
    now: datetime,
    policy: tag_policy.Policy,
) -> ItemView:
    """The put of a note that exists: a new version, or tags in place."""
    note_id, content_hash, summary = args.note_id, new.content_hash, new.summary
    deletes, adds = args.deletes, args.adds
    stored_system, fts_text = new.stored_system, new.fts_text
    system_note, needs_summary = new.system_note, new.needs_summary
    pending_content, force = new.pending_content, args.force
    content_type, source = args.content_type, args.source
    created_override = args.created_override
    explicit_summary = args.summary is not None

    def merged_tags(existing: Note) -> dict[str, Any]:
        old_user, _ = split_system(existing.tags)
        # a singular tag named by the put is replaced, not merged
        replaced = tag_policy.check(policy, adds=adds, existing=old_user)
        try:
            return tagrules.apply_changes(old_user, add=adds, remove_keys=deletes | replaced)
        except tagrules.InvalidTags as exc:
            raise tag_error(exc) from exc

    existing = await repo.get(session, scope, note_id, lock=True)
    if existing is None:  # the insert conflicted, so it exists: outside the tag scope
        raise taken_outside_scope(note_id)
    user_tags = merged_tags(existing)
    # a .tag/<key> note keeps its rules through a new text unless the put changes them
    old_flags = tag_policy.flags_of(existing.tags)
    flags = args.flags.apply(old_flags)
    if args.flags:
        tag_policy.check_flags(note_id, flags)
    all_tags = {**user_tags, **stored_system, **flags}
    tag_text = tag_words(note_id, user_tags)
    content_changed = existing.content_hash != content_hash
    tags_changed = user_tags != split_system(existing.tags)[0]
    flags_changed = flags != old_flags
    await edges.inverse_changed(session, scope, note_id=note_id, before=old_flags, after=flags)
    values: dict[str, Any] = {"tags": all_tags, "tag_index": tagrules.index_terms(user_tags)}
    if created_override is not None:
        values["created_at"] = created_override
    if content_changed and PENDING_TAG not in existing.tags:
        await archive_version(session, scope, note_id=note_id)
    if content_changed:
        await vectors.delete_for_note(session, scope, note_id, kind="part")
        if await repo.delete_parts(session, scope, note_id):
            await feed.record(session, scope, mutation="part_delete", entity_id=note_id, kind=None)
        values.update(
            summary=summary,
            content_hash=content_hash,
            content_type=content_type,
            source=source,
            updated_at=now,
            accessed_at=now,
            pending_content=pending_content,
        )
    else:
        # Same content: tags (and an explicit summary) update in place.
        values["tags"] = {**args.flags.apply(split_system(existing.tags)[1]), **user_tags}
        # The same content keeps its summary unless a new one is given.
        if explicit_summary and summary != existing.summary:
            values["summary"] = summary
        if tags_changed or flags_changed or "summary" in values:
            values["updated_at"] = now
        if force:
            values["pending_content"] = pending_content
    note = await repo.update_note(
        session,
        scope,
        note_id,
        values=values,
        fts_text=fts_text if (content_changed or tags_changed) else None,
        tag_text=tag_text if (content_changed or tags_changed) else None,
    )
    if tags_changed:
        await edges.sync_tag_edges(session, scope, note_id=note_id, user_tags=user_tags)
    changed = content_changed or tags_changed or flags_changed or "summary" in values
    pending: list[str] = []
    if content_changed:
        await _keep_text(session, scope, args)
    elif args.placeholder is None:
        # The same text again: kept now if the project began keeping text since.
        await texts.keep_missing(
            session, scope, note_id=note_id, text=args.content, segments=args.segments
        )
    if content_changed or force:
        pending = await enqueue_processing(
            session,
            scope,
            note_id=note_id,
            system_note=system_note,
            needs_summary=needs_summary,
            content_hash=content_hash,
            graph_extraction=limits.graph_extraction,
            chunk=_long(args, limits),
        )
    if changed:
        await feed.record(
            session, scope, mutation="doc_update", entity_id=note_id, kind=EventKind.PUT
        )
    open_jobs = await jobs.open_kinds_by_note(session, scope, [note_id])
    return note_view(note, changed=changed, pending=pending or open_jobs.get(note_id, []))


async def _put_by_uri(
    session: AsyncSession, scope: Scope, *, data: PutInput, limits: Limits
) -> ItemView:
    """Put by URI alone: the note (id = the normalised URI) gets a placeholder
    at once and a fetch job; the document's text replaces the placeholder when
    the worker has fetched, read and sanitised it (no version is kept of the
    placeholder). An existing note keeps its content until then."""
    uri = data.uri or ""
    note_id = valid_id(data.id or uri, "id" if data.id else "uri")
    if not uri.lower().startswith(("http://", "https://")):
        raise BadRequest(f"only http and https URIs can be fetched, not {uri!r}")
    try:  # invalid tags fail now, not in the worker
        _, adds = tagrules.user_tag_changes(data.tags)
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    tag_policy.flag_changes(note_id, data.tags)
    existing = await repo.get(session, scope, note_id)
    before = split_system(existing.tags)[0] if existing is not None else {}
    await tag_policy.admit(session, scope, adds=adds, existing=before)
    if existing is None:
        view = await put_clean(
            session,
            scope,
            data=dataclasses.replace(
                data, id=note_id, content=f"{uri} (being fetched)", placeholder="fetch"
            ),
            limits=limits,
        )
    else:
        view = note_view(existing)
    await jobs.enqueue(
        session,
        scope,
        kind=JobKind.FETCH,
        note_id=note_id,
        payload={"uri": uri, "tags": dict(data.tags or {}), "analyze": data.analyze},
    )
    view.pending = sorted({*view.pending, JobKind.FETCH.value})
    return view


def taken_outside_scope(note_id: str) -> OutsideScope:
    """A put's insert conflicted but the note cannot be read: it exists
    outside the credential's tag scope."""
    return OutsideScope(
        f"note id {note_id!r} is taken by a note outside this credential's tag scope"
    )


async def archive_version(session: AsyncSession, scope: Scope, *, note_id: str) -> int:
    """The note's current state (and its vectors) become its newest version."""
    version = await repo.archive_current(session, scope, note_id)
    await vectors.archive_note_vectors(session, scope, note_id, version)
    await feed.record(
        session,
        scope,
        mutation="version_insert",
        entity_id=note_id,
        kind=None,
        payload={"version": version},
    )
    return version


async def after_insert(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    user_tags: dict[str, Any],
    system_note: bool,
    needs_summary: bool,
    content_hash: str,
    limits: Limits,
    chunk: tuple[Segment, ...] | None = None,
) -> list[str]:
    """What every new note gets: its change-feed entry, its tag edges and its
    background work (returns the kinds queued)."""
    await feed.record(session, scope, mutation="doc_insert", entity_id=note_id, kind=EventKind.PUT)
    if user_tags:
        await edges.sync_tag_edges(session, scope, note_id=note_id, user_tags=user_tags)
    return await enqueue_processing(
        session,
        scope,
        note_id=note_id,
        system_note=system_note,
        needs_summary=needs_summary,
        content_hash=content_hash,
        existed=False,
        graph_extraction=limits.graph_extraction,
        chunk=chunk,
    )


def _long(args: WriteArgs, limits: Limits) -> tuple[Segment, ...] | None:
    return chunking(
        note_id=args.note_id,
        content=args.content,
        placeholder=args.placeholder,
        segments=args.segments,
        limits=limits,
    )


async def _keep_text(
    session: AsyncSession, scope: Scope, args: WriteArgs, *, existed: bool = True
) -> None:
    """The note's text beside it, when its project keeps text (a placeholder's
    is not the note's text: an older one goes; a new note has none to drop)."""
    if args.placeholder is not None:
        if existed:
            await texts.drop(session, scope, args.note_id)
        return
    await texts.keep(
        session,
        scope,
        note_id=args.note_id,
        text=args.content,
        segments=args.segments,
        existed=existed,
    )


async def create_now(session: AsyncSession, scope: Scope, *, note_id: str) -> Note | None:
    template = await repo.get(session, scope, ".now")
    body = template.summary if template is not None else NOW_TEMPLATE
    tags: dict[str, Any] = {}
    if note_id != NOW_ID:
        user = note_id.split(":", 1)[1]
        body = f"# Now ({user})\n\nWorking context."
        tags["user"] = user
    await write_text(session, scope, note_id=note_id, body=body, tags=tags)
    return await repo.get(session, scope, note_id)


def text_args(note_id: str, body: str, tags: Mapping[str, str]) -> WriteArgs:
    return WriteArgs(
        note_id=note_id,
        content=body,
        summary=body,
        deletes=set(),
        adds={k: [v] for k, v in tags.items() if not k.startswith("_")},
        created_override=None,
        force=False,
        source="inline",
        content_type="text/markdown",
        uri=None,
    )


async def write_text(
    session: AsyncSession, scope: Scope, *, note_id: str, body: str, tags: Mapping[str, str]
) -> ItemView:
    """A server-made note whose summary is its whole text (``now``, system notes)."""
    args = text_args(note_id, body, tags)
    return await write(session, scope, args=args, limits=Limits())


async def request_analysis(
    session: AsyncSession, scope: Scope, *, raw_id: str, content: str | None, limits: Limits
) -> ItemView:
    """Queue splitting a note into parts. Uses ``content`` when given, else the
    content still held for the note's pending work."""
    note_id = valid_id(raw_id)
    note = await repo.get(session, scope, note_id)
    if note is None:
        raise NoteNotFound(f"note not found: {raw_id}")
    if content is not None and len(content) > limits.max_content_chars:
        raise PayloadTooLarge(
            f"content is {len(content)} characters; the limit is {limits.max_content_chars}"
        )
    if content is not None and await tenants.sanitizing(session, scope):
        content = redaction.clean(content)
    if content is None and note.pending_content is None:
        raise ContentNotHeld(
            "the note's content is no longer held (keepmem keeps only summaries): "
            "send the content with the analyze request"
        )
    payload: dict[str, Any] = (
        {"content": content} if content is not None else {"content_hash": note.content_hash}
    )
    await jobs.enqueue(
        session, scope, kind=JobKind.ANALYZE, note_id=note_id, payload=payload, priority=7
    )
    open_jobs = await jobs.open_kinds_by_note(session, scope, [note_id])
    return note_view(note, pending=open_jobs.get(note_id, []))
