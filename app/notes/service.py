"""Notes: keep's put / get / list / tag / delete / move / versions / parts rules.

Services take ``(session, scope, *, ...)``, never commit and never import
FastAPI or arq. SQL lives in the repositories they call.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import storable
from app.auth.scope import Scope
from app.embeddings import repository as vectors
from app.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from app.feed import repository as feed
from app.graph import service as graph
from app.ingest import sanitize
from app.ingest import service as ingest
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.models import Note
from app.notes import repository as repo
from app.notes import tags as tagrules
from app.notes.ids import (
    NOW_ID,
    InvalidId,
    content_id,
    is_now_id,
    is_part_id,
    is_system_id,
    normalize_id,
    parse_selector,
)
from app.notes.system_docs import NOW_TEMPLATE, SYSTEM_DOCS
from app.notes.views import ItemView, note_view, part_view, split_system, version_view
from app.settings import Settings
from app.timeutil import ago, keep_ts, parse_timestamp, utcnow


@dataclass(frozen=True, slots=True)
class Limits:
    max_content_chars: int = 1_000_000
    max_summary_chars: int = 10_000
    max_summary_length: int = 200
    max_list_limit: int = 1000
    max_fts_chars: int = 200_000
    graph_extraction: bool = True  # queue extract_graph jobs (graph_provider != "none")


def _id(raw: str, what: str = "id") -> str:
    try:
        return normalize_id(raw)
    except InvalidId as exc:
        raise BadRequest(f"invalid {what}: {exc}") from exc


def limits_of(settings: Settings) -> Limits:
    return Limits(
        max_content_chars=settings.max_content_chars,
        max_summary_chars=settings.max_summary_chars,
        max_summary_length=settings.max_summary_length,
        max_list_limit=settings.max_list_limit,
        max_fts_chars=settings.max_fts_chars,
        graph_extraction=settings.graph_provider != "none",
    )


def valid_id(raw: str, what: str = "id") -> str:
    """A normalised note id, or 400."""
    return _id(raw, what)


def _tag_error(exc: ValueError) -> BadRequest:
    return BadRequest(f"invalid tags: {exc}")


def _hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def _tag_text(note_id: str, tags: Mapping[str, Any]) -> str:
    words = [] if note_id.startswith("%") else [note_id]
    for key, value in tags.items():
        if not key.startswith("_"):
            words.extend(tagrules.values_of(value, key))
    return " ".join(words)


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


async def put(session: AsyncSession, scope: Scope, *, data: PutInput, limits: Limits) -> ItemView:
    """Create or update a note with keep's versioning rules.

    A content change archives the previous state as a version; the same
    content again (or only new tags) updates in place. Long content gets a
    placeholder summary and a summarize job; every user note gets an embed job.
    """
    if await ingest.sanitizing(session, scope):
        data = ingest.clean_fields(data, text=("content", "summary"), tags=("tags",))
    content = data.content
    if content is None:
        if data.uri is None:
            raise BadRequest("put needs content or uri")
        return await _put_by_uri(session, scope, data=data, limits=limits)
    if len(content) > limits.max_content_chars:
        raise PayloadTooLarge(
            f"content is {len(content)} characters; the limit is {limits.max_content_chars}"
        )
    if data.summary is not None and len(data.summary) > limits.max_summary_chars:
        raise PayloadTooLarge(
            f"summary is {len(data.summary)} characters; the limit is {limits.max_summary_chars}"
        )
    if data.id:
        note_id = _id(data.id)
    elif data.uri:
        note_id = _id(data.uri, "uri")
    else:
        if not content.strip():
            raise BadRequest("content is empty")
        note_id = content_id(content)
    if is_part_id(note_id):
        raise BadRequest(f"cannot put to a part id {note_id!r}: parts are made by analysis")
    try:
        deletes, adds = tagrules.user_tag_changes(data.tags)
    except tagrules.InvalidTags as exc:
        raise _tag_error(exc) from exc
    created_override = None
    if data.created_at:
        try:
            created_override = parse_timestamp(data.created_at)
        except ValueError as exc:
            raise BadRequest(
                f"invalid created_at {data.created_at[:80]!r}: use ISO-8601 ({exc})"
            ) from exc
    view = await _write(
        session,
        scope,
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
        limits=limits,
        placeholder=data.placeholder,
    )
    if data.analyze and not is_system_id(note_id):
        # Hold the content for the analysis even when it did not change.
        await repo.update_note(session, scope, note_id, values={"pending_content": content})
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.ANALYZE,
            note_id=note_id,
            priority=7,
            payload={"content_hash": _hash(content)},
        )
        view.pending = sorted({*view.pending, JobKind.ANALYZE.value})
    return view


async def _write(
    session: AsyncSession,
    scope: Scope,
    *,
    note_id: str,
    content: str,
    summary: str | None,
    deletes: set[str],
    adds: dict[str, list[str]],
    created_override: datetime | None,
    force: bool,
    source: str,
    content_type: str,
    uri: str | None,
    limits: Limits,
    placeholder: str | None = None,
) -> ItemView:
    now = utcnow()
    # A placeholder is neither embedded nor summarised: the real text follows.
    system_note = is_system_id(note_id) or placeholder is not None
    content_hash = _hash(content)
    needs_summary = False
    explicit_summary = summary is not None
    if summary is None:
        if system_note or len(content) <= limits.max_summary_length:
            summary = content
        else:
            summary = content[: limits.max_summary_length] + "..."
            needs_summary = True

    def merged_tags(existing: Note | None) -> dict[str, Any]:
        try:
            if existing is None:
                return tagrules.apply_changes({}, add=adds)
            old_user, _ = split_system(existing.tags)
            return tagrules.apply_changes(old_user, add=adds, remove_keys=deletes)
        except tagrules.InvalidTags as exc:
            raise _tag_error(exc) from exc

    user_tags = merged_tags(None)
    stored_system: dict[str, Any] = {
        "_source": source,
        "_content_type": content_type,
        "_content_length": str(len(content)),
    }
    if uri:
        stored_system["_source_uri"] = uri
    if placeholder:
        stored_system[PENDING_TAG] = placeholder
    if not needs_summary:
        stored_system["_summarized_hash"] = content_hash[:10]
    all_tags = {**user_tags, **stored_system}
    fts_text = content[: limits.max_fts_chars]
    tag_text = _tag_text(note_id, user_tags)
    pending_content = content if (needs_summary or not system_note) else None

    # Insert first (most puts make new notes); an existing note takes the
    # update path below, under a row lock, with its tags merged.
    inserted = await repo.insert_note(
        session,
        scope,
        note_id=note_id,
        values={
            "summary": summary,
            "tags": all_tags,
            "tag_index": tagrules.index_terms(user_tags),
            "content_hash": content_hash,
            "content_type": content_type,
            "source": source,
            # An imported note keeps its own time: created then, unchanged since.
            "created_at": created_override or now,
            "updated_at": created_override or now,
            "accessed_at": now,
            "pending_content": pending_content,
        },
        fts_text=fts_text,
        tag_text=tag_text,
    )
    if inserted is not None:
        await feed.record(session, scope, mutation="doc_insert", entity_id=note_id)
        if user_tags:
            await graph.sync_tag_edges(session, scope, note_id, user_tags)
        queued = await _enqueue_processing(
            session,
            scope,
            note_id,
            system_note=system_note,
            needs_summary=needs_summary,
            content_hash=content_hash,
            existed=False,
            graph_extraction=limits.graph_extraction,
        )
        return note_view(inserted, changed=True, pending=queued)

    existing = await repo.get(session, scope, note_id, lock=True)
    assert existing is not None  # the insert conflicted, so it exists
    user_tags = merged_tags(existing)
    all_tags = {**user_tags, **stored_system}
    tag_text = _tag_text(note_id, user_tags)
    content_changed = existing.content_hash != content_hash
    tags_changed = user_tags != split_system(existing.tags)[0]
    values: dict[str, Any] = {"tags": all_tags, "tag_index": tagrules.index_terms(user_tags)}
    if created_override is not None:
        values["created_at"] = created_override
    if content_changed and PENDING_TAG not in existing.tags:
        version = await repo.archive_current(session, scope, note_id)
        await vectors.archive_note_vectors(session, scope, note_id, version)
        await feed.record(
            session,
            scope,
            mutation="version_insert",
            entity_id=note_id,
            payload={"version": version},
        )
    if content_changed:
        await vectors.delete_for_note(session, scope, note_id, kind="part")
        if await repo.delete_parts(session, scope, note_id):
            await feed.record(session, scope, mutation="part_delete", entity_id=note_id)
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
        values["tags"] = {**split_system(existing.tags)[1], **user_tags}
        # The same content keeps its summary unless a new one is given.
        if explicit_summary and summary != existing.summary:
            values["summary"] = summary
        if tags_changed or "summary" in values:
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
        await graph.sync_tag_edges(session, scope, note_id, user_tags)
    changed = content_changed or tags_changed or "summary" in values
    pending: list[str] = []
    if content_changed or force:
        pending = await _enqueue_processing(
            session,
            scope,
            note_id,
            system_note=system_note,
            needs_summary=needs_summary,
            content_hash=content_hash,
            graph_extraction=limits.graph_extraction,
        )
    if changed:
        await feed.record(session, scope, mutation="doc_update", entity_id=note_id)
    open_jobs = await jobs.open_kinds_by_note(session, scope, [note_id])
    return note_view(note, changed=changed, pending=pending or open_jobs.get(note_id, []))


PENDING_TAG = "_pending_document"


async def _put_by_uri(
    session: AsyncSession, scope: Scope, *, data: PutInput, limits: Limits
) -> ItemView:
    """Put by URI alone: the note (id = the normalised URI) gets a placeholder
    at once and a fetch job; the document's text replaces the placeholder when
    the worker has fetched, read and sanitised it (no version is kept of the
    placeholder). An existing note keeps its content until then."""
    uri = data.uri or ""
    note_id = _id(data.id or uri, "id" if data.id else "uri")
    if not uri.lower().startswith(("http://", "https://")):
        raise BadRequest(f"only http and https URIs can be fetched, not {uri!r}")
    try:
        tagrules.user_tag_changes(data.tags)  # invalid tags fail now, not in the worker
    except tagrules.InvalidTags as exc:
        raise _tag_error(exc) from exc
    existing = await repo.get(session, scope, note_id)
    if existing is None:
        view = await put(
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


async def _enqueue_processing(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    *,
    system_note: bool,
    needs_summary: bool,
    content_hash: str,
    existed: bool = True,
    graph_extraction: bool = True,
) -> list[str]:
    """Outbox rows for the work a write causes, in the write's own transaction."""
    if system_note:
        return []
    kinds = [JobKind.EMBED]
    if needs_summary:
        kinds.append(JobKind.SUMMARIZE)
    if graph_extraction:
        kinds.append(JobKind.EXTRACT_GRAPH)
    for kind in kinds:
        await jobs.enqueue(
            session,
            scope,
            kind=kind,
            note_id=note_id,
            payload={"content_hash": content_hash},
            supersede=existed,  # a new note has no older work to supersede
            # Graph extraction waits behind embedding and summaries: a note is
            # findable by meaning first (measured: run at the same priority it
            # cut the embedding rate of bench/pipeline.py from 83 to 22 notes/s).
            priority=jobs.BACKGROUND_PRIORITY if kind == JobKind.EXTRACT_GRAPH else 5,
        )
    return [k.value for k in kinds]


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
            note = await _create_now(session, scope, note_id)
        if note is not None:
            now = utcnow()
            await repo.touch_accessed(session, scope, note_id, now)
            note.accessed_at = now
            pending = await jobs.open_kinds_by_note(session, scope, [note_id])
            return note_view(note, pending=pending.get(note_id, []))
    try:
        selector = parse_selector(raw_id)
    except InvalidId as exc:
        raise BadRequest(f"invalid id: {exc}") from exc
    if selector is None:
        if note_id is None:
            raise BadRequest(f"invalid id: {raw_id!r}")
        raise NotFound(f"note not found: {raw_id}")
    base = await repo.get(session, scope, selector.base_id)
    if base is None:
        raise NotFound(f"note not found: {raw_id}")
    if selector.part is not None:
        part = await repo.get_part(session, scope, selector.base_id, selector.part)
        if part is None:
            raise NotFound(f"part not found: {raw_id}")
        return part_view(selector.base_id, part)
    offset = selector.version or 0
    if offset == 0:
        return note_view(base)
    if offset > 0:
        version = await repo.version_at(session, scope, selector.base_id, newest_offset=offset)
    else:
        version = await repo.version_at(session, scope, selector.base_id, oldest_offset=-offset)
    if version is None:
        raise NotFound(f"version not found: {raw_id}")
    total = await repo.count_versions(session, scope, selector.base_id)
    newest_offset = offset if offset > 0 else total + offset + 1
    return version_view(selector.base_id, newest_offset, version)


async def _create_now(session: AsyncSession, scope: Scope, note_id: str) -> Note | None:
    template = await repo.get(session, scope, ".now")
    body = template.summary if template is not None else NOW_TEMPLATE
    tags: dict[str, Any] = {}
    if note_id != NOW_ID:
        user = note_id.split(":", 1)[1]
        body = f"# Now ({user})\n\nWorking context."
        tags["user"] = user
    await _write_text(session, scope, note_id=note_id, body=body, tags=tags)
    return await repo.get(session, scope, note_id)


async def _write_text(
    session: AsyncSession, scope: Scope, *, note_id: str, body: str, tags: Mapping[str, str]
) -> ItemView:
    """A server-made note whose summary is its whole text (``now``, system notes)."""
    return await _write(
        session,
        scope,
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
        limits=Limits(),
    )


# -- list ---------------------------------------------------------------------

ORDER_BY = ("updated", "accessed", "created", "id")
_DURATION = re.compile(
    r"^P(?:(?P<y>\d+)Y)?(?:(?P<mo>\d+)M)?(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?:(?P<h>\d+)H)?(?:(?P<mi>\d+)M)?(?:(?P<s>\d+)S)?)?$"
)


def parse_when(value: str, *, now: datetime | None = None) -> datetime:
    """An ISO-8601 duration back from now (``P3D``, ``PT1H``, ``P1W``) or a date."""
    text = value.strip()
    m = _DURATION.match(text.upper())
    try:
        if m and text.upper() not in ("P", "PT"):
            parts = {k: int(v) if v else 0 for k, v in m.groupdict().items()}
            return ago(
                now or utcnow(),
                days=parts["y"] * 365 + parts["mo"] * 30 + parts["w"] * 7 + parts["d"],
                hours=parts["h"],
                minutes=parts["mi"],
                seconds=parts["s"],
            )
        return parse_timestamp(text)
    except ValueError as exc:
        raise BadRequest(
            f"invalid time {value[:80]!r}: use an ISO-8601 duration (P3D, PT1H, P1W) or a "
            f"date ({exc})"
        ) from exc


def _bracket(body: str) -> str:
    """A glob's ``[...]`` body as a bracket expression of literal characters
    and ranges: nothing in it reaches the regex engine as syntax."""
    negate = body[:1] in ("!", "^")
    chars = body[1:] if negate else body
    out: list[str] = []
    i = 0
    while i < len(chars):
        lo = chars[i]
        if i + 2 < len(chars) and chars[i + 1] == "-":
            hi = chars[i + 2]
            if lo > hi:
                raise BadRequest(f"invalid range {lo}-{hi} in glob: the first must not be larger")
            out.append(f"{_class_char(lo)}-{_class_char(hi)}")
            i += 3
        else:
            out.append(_class_char(lo))
            i += 1
    return f"[{'^' if negate else ''}{''.join(out)}]"


def _class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\^]-[" else ch


def glob_regex(pattern: str) -> str:
    """An id glob (``*``, ``?``, ``[...]``) as an anchored regular expression
    in which only the glob's own operators are syntax."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and (end := pattern.find("]", i + 2)) != -1:
            out.append(_bracket(pattern[i + 1 : end]))
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    out.append("$")
    return "".join(out)


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
        raise _tag_error(exc) from exc
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


async def count(session: AsyncSession, scope: Scope) -> int:
    return await repo.count(session, scope)


# -- tag ----------------------------------------------------------------------


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

    Tags change in place: no version is archived.
    """
    note_id = _id(raw_id)
    if set_tags and await ingest.sanitizing(session, scope):
        set_tags = sanitize.clean_tags(set_tags)
    try:
        deletes, adds = tagrules.user_tag_changes(set_tags)
        deletes |= tagrules.parse_key_list(remove)
        drop_values = tagrules.parse_value_map(remove_values)
    except tagrules.InvalidTags as exc:
        raise _tag_error(exc) from exc
    note = await repo.get(session, scope, note_id, lock=True)
    if note is None:
        raise NotFound(f"note not found: {raw_id}")
    user, system = split_system(note.tags)
    try:
        new_user = tagrules.apply_changes(
            user, add=adds, remove_keys=deletes, remove_values=drop_values
        )
    except tagrules.InvalidTags as exc:
        raise _tag_error(exc) from exc
    if new_user == user:
        return note_view(note, changed=False)
    note = await repo.update_note(
        session,
        scope,
        note_id,
        values={
            "tags": {**new_user, **system},
            "tag_index": tagrules.index_terms(new_user),
            "updated_at": utcnow(),
        },
        fts_text=note.pending_content,
        tag_text=_tag_text(note_id, new_user),
    )
    await feed.record(session, scope, mutation="doc_update", entity_id=note_id)
    await graph.sync_tag_edges(session, scope, note_id, new_user)
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


# -- delete / revert ----------------------------------------------------------


@dataclass(slots=True)
class DeleteResult:
    deleted: str
    reverted: bool
    item: ItemView | None


async def delete(
    session: AsyncSession, scope: Scope, *, raw_id: str, delete_versions: bool = True
) -> DeleteResult:
    """Delete a note with its history, or revert it to its previous version.

    Reverting a note that has no history deletes it.
    """
    note_id = _id(raw_id)
    if is_part_id(note_id):
        raise BadRequest(f"cannot delete a part ({raw_id}): delete or re-analyze its note")
    note = await repo.get(session, scope, note_id, lock=True)
    if note is None:
        raise NotFound(f"note not found: {raw_id}")
    if not delete_versions:
        previous = await repo.version_at(session, scope, note_id, newest_offset=1)
        if previous is not None:
            restored = await repo.update_note(
                session,
                scope,
                note_id,
                values={
                    "summary": previous.summary,
                    "tags": previous.tags,
                    "tag_index": tagrules.index_terms(previous.tags),
                    "content_hash": previous.content_hash,
                    "updated_at": utcnow(),
                    "pending_content": None,
                    "fts": previous.fts,
                },
            )
            await vectors.restore_version_vectors(session, scope, note_id, previous.version)
            await repo.delete_versions(session, scope, note_id, [previous.version])
            await repo.delete_parts(session, scope, note_id)
            await vectors.delete_for_note(session, scope, note_id, kind="part")
            await jobs.cancel_for_note(session, scope, note_id)
            await feed.record(session, scope, mutation="version_delete", entity_id=note_id)
            await feed.record(session, scope, mutation="doc_update", entity_id=note_id)
            await graph.sync_tag_edges(session, scope, note_id, split_system(previous.tags)[0])
            return DeleteResult(deleted=note_id, reverted=True, item=note_view(restored))
    await jobs.cancel_for_note(session, scope, note_id)
    await repo.delete_note(session, scope, note_id)
    await graph.forget_note(session, scope, note_id)
    await feed.record(session, scope, mutation="doc_delete", entity_id=note_id)
    return DeleteResult(deleted=note_id, reverted=False, item=None)


# -- move -----------------------------------------------------------------------


async def move(
    session: AsyncSession,
    scope: Scope,
    *,
    name: str,
    source: str = NOW_ID,
    tags: Mapping[str, Any] | None = None,
    only_current: bool = False,
) -> ItemView:
    """Extract versions of ``source`` (all, tag-matching, or only the current)
    into the note ``name``; an existing target keeps its history underneath.

    The source keeps what did not match; emptied, it is deleted (``now`` is
    reset to its template instead).
    """
    if not name:
        raise BadRequest("name cannot be empty")
    target_id = _id(name, "name")
    source_id = _id(source, "source")
    if is_part_id(target_id):
        raise BadRequest(f"cannot move to a part id {target_id!r}")
    if target_id == source_id:
        raise BadRequest("source and name are the same note")
    try:
        wanted = tagrules.parse_value_map(tags)
    except tagrules.InvalidTags as exc:
        raise _tag_error(exc) from exc
    src = await repo.get(session, scope, source_id, lock=True, fts=True)
    if src is None:
        raise NotFound(f"source note not found: {source}")
    history = [] if only_current else list(await repo.all_versions(session, scope, source_id))
    moved_history = [v for v in history if tagrules.matches(v.tags, wanted)]
    current_moves = tagrules.matches(src.tags, wanted)
    if not moved_history and not current_moves:
        raise BadRequest("no versions of the source match the tag filter")

    now = utcnow()
    entries: list[dict[str, Any]] = [
        {
            "summary": v.summary,
            "tags": v.tags,
            "content_hash": v.content_hash,
            "created_at": v.created_at,
            "updated_at": v.updated_at,
            "fts": v.fts,
        }
        for v in moved_history
    ]
    if current_moves:
        entries.append(
            {
                "summary": src.summary,
                "tags": src.tags,
                "content_hash": src.content_hash,
                "created_at": src.created_at,
                "updated_at": src.updated_at,
                "fts": src.fts,
            }
        )
    head = entries.pop()
    target = await repo.get(session, scope, target_id, lock=True)
    if target is not None:
        archived = await repo.archive_current(session, scope, target_id)
        await vectors.archive_note_vectors(session, scope, target_id, archived)
    base_version = await repo.max_version(session, scope, target_id) + 1 if target else 1
    head_tags = {**head["tags"], "_saved_from": source_id, "_saved_at": keep_ts(now)}
    head_user, _ = split_system(head_tags)
    head_values = {
        "summary": head["summary"],
        "tags": head_tags,
        "tag_index": tagrules.index_terms(head_user),
        "content_hash": head["content_hash"],
        "content_type": src.content_type,
        "source": src.source,
        "updated_at": now,
        "accessed_at": now,
        "pending_content": None,
        "fts": head["fts"],
    }
    if target is None:
        await repo.insert_note(
            session,
            scope,
            note_id=target_id,
            values={**head_values, "created_at": head["created_at"]},
            fts_text="",
            tag_text="",
        )
        await feed.record(session, scope, mutation="doc_insert", entity_id=target_id)
    else:
        await repo.update_note(session, scope, target_id, values=head_values)
        await feed.record(session, scope, mutation="doc_update", entity_id=target_id)
    await repo.insert_versions(
        session,
        scope,
        target_id,
        [{**e, "version": base_version + i} for i, e in enumerate(entries)],
    )

    # What is left of the source.
    moved_numbers = [v.version for v in moved_history]
    await repo.delete_versions(session, scope, source_id, moved_numbers)
    await vectors.delete_versions(session, scope, source_id, moved_numbers)
    if current_moves:
        remaining = [v for v in history if v not in moved_history]
        if only_current:
            remaining = list(await repo.all_versions(session, scope, source_id))
        if remaining:
            newest = remaining[-1]
            await repo.update_note(
                session,
                scope,
                source_id,
                values={
                    "summary": newest.summary,
                    "tags": newest.tags,
                    "tag_index": tagrules.index_terms(split_system(newest.tags)[0]),
                    "content_hash": newest.content_hash,
                    "updated_at": now,
                    "pending_content": None,
                    "fts": newest.fts,
                },
            )
            await repo.delete_versions(session, scope, source_id, [newest.version])
            # The restored version's vector becomes the note's (or none: reindexed later).
            await vectors.restore_version_vectors(session, scope, source_id, newest.version)
        else:
            await jobs.cancel_for_note(session, scope, source_id)
            await repo.delete_note(session, scope, source_id)
            if is_now_id(source_id):
                await _create_now(session, scope, source_id)
        await feed.record(session, scope, mutation="doc_update", entity_id=source_id)
    moved = await repo.get(session, scope, target_id)
    assert moved is not None
    await graph.sync_tag_edges(session, scope, target_id, split_system(moved.tags)[0])
    left = await repo.get(session, scope, source_id)
    if left is None:
        await graph.forget_note(session, scope, source_id)
    else:
        await graph.sync_tag_edges(session, scope, source_id, split_system(left.tags)[0])
    return note_view(moved, changed=True)


# -- versions and parts -------------------------------------------------------------


@dataclass(slots=True)
class VersionEntry:
    offset: int
    summary: str
    date: str
    tags: dict[str, Any]


async def versions(
    session: AsyncSession, scope: Scope, *, raw_id: str, limit: int, offset: int = 0
) -> tuple[list[VersionEntry], int]:
    """Archived versions newest first; offset 1 is the previous version."""
    note_id = _id(raw_id)
    if not 1 <= limit <= 1000 or offset < 0:
        raise BadRequest("limit must be 1-1000 and offset >= 0")
    if await repo.get(session, scope, note_id) is None:
        raise NotFound(f"note not found: {raw_id}")
    rows = await repo.list_versions(session, scope, note_id, limit=limit, offset=offset)
    total = await repo.count_versions(session, scope, note_id)
    entries = [
        VersionEntry(
            offset=offset + i + 1,
            summary=v.summary,
            date=keep_ts(v.updated_at),
            tags=version_view(note_id, offset + i + 1, v).tags,
        )
        for i, v in enumerate(rows)
    ]
    return entries, total


async def parts(session: AsyncSession, scope: Scope, *, raw_id: str) -> list[ItemView]:
    note_id = _id(raw_id)
    if await repo.get(session, scope, note_id) is None:
        raise NotFound(f"note not found: {raw_id}")
    return [part_view(note_id, p) for p in await repo.list_parts(session, scope, note_id)]


# -- seeding ------------------------------------------------------------------------


async def seed_system_docs(session: AsyncSession, scope: Scope) -> int:
    """Write the bundled system notes into a new project."""
    for doc in SYSTEM_DOCS:
        await _write_text(session, scope, note_id=doc.id, body=doc.body, tags=doc.tags)
        system = {k: v for k, v in doc.tags.items() if k.startswith("_")}
        if system:
            note = await repo.get(session, scope, doc.id)
            assert note is not None
            await repo.update_note(session, scope, doc.id, values={"tags": {**note.tags, **system}})
    return len(SYSTEM_DOCS)


async def request_analysis(
    session: AsyncSession, scope: Scope, *, raw_id: str, content: str | None, limits: Limits
) -> ItemView:
    """Queue splitting a note into parts. Uses ``content`` when given, else the
    content still held for the note's pending work."""
    note_id = _id(raw_id)
    note = await repo.get(session, scope, note_id)
    if note is None:
        raise NotFound(f"note not found: {raw_id}")
    if content is not None and len(content) > limits.max_content_chars:
        raise PayloadTooLarge(
            f"content is {len(content)} characters; the limit is {limits.max_content_chars}"
        )
    if content is not None and await ingest.sanitizing(session, scope):
        content = sanitize.clean(content)
    if content is None and note.pending_content is None:
        raise Conflict(
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
