"""mem0's hosted API (what ``mem0ai``'s ``MemoryClient`` calls) on
keepmem's memories, so a team moving from mem0 changes the client's
``host`` and nothing else.

How mem0's words map onto keepmem's:

* A mem0 memory is a keepmem memory (a note ``mem/<hex>`` tagged
  ``memory=...``): its id is keepmem's, ``/`` included (the client
  percent-encodes it; a bare ``<hex>`` is read as ``mem/<hex>`` too).
  ``user_id`` is the memory's ``user`` (and its subject), ``agent_id`` its
  ``agent``, ``run_id`` its ``thread`` (a keepmem thread id: letters,
  digits and ``._:@+=~-``), ``app_id`` a tag ``app``; ``metadata`` is kept
  whole as JSON in the tag ``mem0_metadata`` (at most 4 KB) and read back as
  given. Memories keepmem formed itself (threads, ``/v1/memories``) are
  mem0 memories too.
* add with ``infer: false`` stores each message as a memory, verbatim
  (whitespace folded; at most 1,000 characters), reconciled as keepmem
  reconciles what an agent remembers: the same text said again for the same
  subject is the same memory (event ``NONE``), the same text with more
  words after it a new wording of it (``UPDATE``), nothing is superseded.
  add with ``infer`` (mem0's default) adds the messages to a keepmem thread
  (``run_id``, else one per user / agent) and queues keepmem's memory
  formation (a model when the server has one, else the offline rules): the
  answer is ``PENDING`` with no memories, as mem0's queued adds are; they
  appear once the worker has run. keepmem's extraction does not carry
  metadata or an app to the memories it forms, so those need
  ``infer: false`` (400 otherwise).
* search is keepmem's find over memories (hybrid; ``keyword_search``: full
  text only), ``top_k`` at most 100, ``threshold`` against keepmem's score;
  get_all pages with ``page`` / ``page_size`` (mem0's ``count`` / ``next``
  / ``previous`` / ``results``); both take mem0's filters
  (``filters.py``), current memories only unless ``latest_only`` is false.
* update writes a new version of the memory's note (history: ``ADD`` then
  one ``UPDATE`` per wording); metadata changes in place.
* delete_all needs at least one of user_id, agent_id, app_id, run_id;
  deleting an entity (``/v2/entities/{type}/{name}/``) also forgets that
  user's, agent's or run's threads (their messages).
* Refused with a 400 naming the parameter: graph memory (``enable_graph``),
  categories, custom instructions, ``includes`` / ``excludes``,
  ``immutable``, ``expiration_date``, ``structured_data_schema``,
  ``reference_date``, output formats other than v1.1; ``org_id`` /
  ``project_id`` other than the key's own (``X-Project`` picks a project).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, Conflict, NoteNotFound
from app.kit.tags import values_of
from app.kit.timeutil import parse_timestamp
from app.mem0compat.filters import Fields, Predicate, compile_filter, pushdown
from app.mem0compat.schemas import (
    MAX_TEXT,
    AddEvent,
    AddIn,
    AddOut,
    BatchDeleteItem,
    BatchUpdateItem,
    GetAllIn,
    HistoryOut,
    Mem0Memory,
    PageOut,
    SearchIn,
    SearchOut,
    UpdateIn,
)
from app.memories import intake, reconcile
from app.memories import service as memories
from app.memories.model import PREFIX, Candidate, Memory, stamp
from app.memories.schemas import THREAD_ID, MessageBatch, MessageIn, RememberIn
from app.notes import history, reading, tagging
from app.providers.embedding.base import Embedder, QueryCache
from app.search import service as search_service
from app.settings import Limits
from app.tenancy import Scope

METADATA_TAG = "mem0_metadata"
APP_TAG = "app"
MAX_METADATA = 4096
SCAN = 20_000  # memories get_all, delete_all and the entities list read at most
_THREAD = re.compile(THREAD_ID)
_MEMORY_ID = re.compile(r"^mem/[A-Za-z0-9._-]{1,64}$")
_UNSUPPORTED = {
    "custom_categories": "keepmem memories have no categories",
    "custom_instructions": "keepmem's extraction takes no per-request instructions",
    "agent_custom_instructions": "keepmem's extraction takes no per-request instructions",
    "expiration_date": "memories do not expire in keepmem (delete them instead)",
    "structured_data_schema": "keepmem does not extract structured data on add",
    "includes": "keepmem's extraction takes no includes / excludes",
    "excludes": "keepmem's extraction takes no includes / excludes",
    "immutable": "keepmem memories can always be updated (each update is a version)",
    "categories": "keepmem memories have no categories",
    "reference_date": "keepmem's search takes no reference date",
    "timestamp": "a memory's time cannot be changed (add it again instead)",
}


def refuse(message: str) -> BadRequest:
    """A 400 whose ``detail`` carries the message: mem0's client shows ``detail``."""
    return BadRequest(message, detail=message)


def check_request(scope: Scope, body: Any, *, allowed: frozenset[str] = frozenset()) -> None:
    """Refuse what keepmem cannot honour, naming it: parameters it does not
    support, graph memory, other output formats, another tenant's or
    project's ids."""
    for name, why in _UNSUPPORTED.items():
        if name not in allowed and getattr(body, name, None) is not None:
            raise refuse(f"{name} is not supported: {why}")
    if getattr(body, "enable_graph", None):
        raise refuse("enable_graph is not supported: keepmem has no mem0 graph memory")
    fmt = getattr(body, "output_format", None)
    if fmt is not None and fmt != "v1.1":
        raise refuse(f"output_format {fmt[:20]!r} is not supported: only v1.1")
    org, project = getattr(body, "org_id", None), getattr(body, "project_id", None)
    if org is not None and org != str(scope.tenant_id):
        raise refuse("org_id is not this key's tenant: a key works in its own tenant")
    if project is not None and project != scope.project_slug:
        raise refuse(
            f"project_id {project[:60]!r} is not this request's project "
            f"({scope.project_slug!r}): choose a project with the X-Project header"
        )


# -- reading memories back ------------------------------------------------------------


def _first(tags: dict[str, Any], key: str) -> str | None:
    raw = tags.get(key)
    found = values_of(raw, key) if raw is not None else []
    return found[0] if found else None


def metadata_of(m: Memory) -> dict[str, Any] | None:
    raw = _first(m.tags, METADATA_TAG)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def fields_of(m: Memory) -> Fields:
    return Fields(
        id=m.id,
        memory=m.statement,
        user_id=m.user or None,
        agent_id=m.agent or None,
        app_id=_first(m.tags, APP_TAG),
        run_id=m.thread or None,
        metadata=metadata_of(m),
        created_at=m.at,
        updated_at=parse_timestamp(m.updated_at),
    )


def out(m: Memory, score: float | None = None) -> Mem0Memory:
    f = fields_of(m)
    return Mem0Memory(
        id=m.id,
        memory=m.statement,
        user_id=f.user_id,
        agent_id=f.agent_id,
        app_id=f.app_id,
        run_id=f.run_id,
        metadata=f.metadata,
        created_at=stamp(m.at),
        updated_at=m.updated_at,
        score=score,
    )


def memory_id(raw: str) -> str:
    """The id as the client sent it: ``mem/<hex>``, or the bare ``<hex>``."""
    raw = raw.strip("/")
    return raw if "/" in raw else PREFIX + raw


async def held(session: AsyncSession, scope: Scope, raw: str) -> Memory:
    """The memory, or a 404 (another tenant's or project's included)."""
    intake.whole_project(scope)
    wanted = memory_id(raw)
    if not _MEMORY_ID.match(wanted):  # not a version or part address either (@V1, @P1)
        raise NoteNotFound(f"memory not found: {raw[:200]}")
    m = Memory.of(await reading.get(session, scope, raw_id=wanted))
    if m is None:
        raise NoteNotFound(f"memory not found: {raw[:200]}")
    return m


def _with_entities(filters: dict[str, Any] | None, body: Any) -> dict[str, Any] | None:
    """mem0's filters, with the entity ids older clients send at the top level."""
    extra = [
        {name: getattr(body, name)}
        for name in ("user_id", "agent_id", "app_id", "run_id")
        if getattr(body, name, None) is not None
    ]
    if getattr(body, "metadata", None):
        extra.append({"metadata": body.metadata})
    if not extra:
        return filters
    return {"AND": [*([filters] if filters else []), *extra]}


async def scan(
    session: AsyncSession, scope: Scope, filters: dict[str, Any] | None, *, superseded: bool
) -> list[Memory]:
    """Every memory the filter matches (newest first), read through the
    memories domain with the filter's equalities pushed down."""
    test: Predicate = compile_filter(filters)
    found = await memories.memories(
        session, scope, tags=pushdown(filters), include_superseded=superseded, limit=SCAN
    )
    return [m for m in found if test(fields_of(m))]


async def get_all(
    session: AsyncSession, scope: Scope, *, body: GetAllIn, page: int, page_size: int, url: str
) -> PageOut:
    """One page of the memories the filters match, newest first."""
    check_request(scope, body)
    intake.whole_project(scope)
    filters = _with_entities(body.filters, body)
    dates = {
        op: value
        for op, value in (("gte", body.start_date), ("lte", body.end_date))
        if value is not None
    }
    if dates:
        filters = {"AND": [*([filters] if filters else []), {"created_at": dates}]}
    found = await scan(session, scope, filters, superseded=body.latest_only is False)
    start = (page - 1) * page_size
    results = [out(m) for m in found[start : start + page_size]]
    return PageOut(
        count=len(found),
        next=_page_url(url, page + 1) if start + page_size < len(found) else None,
        previous=_page_url(url, page - 1) if page > 1 and found else None,
        results=results,
    )


def _page_url(url: str, page: int) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | {"page": str(page)}
    return urlunsplit(parts._replace(query=urlencode(query)))


async def search(
    session: AsyncSession,
    scope: Scope,
    *,
    body: SearchIn,
    embedder: Embedder,
    cache: QueryCache,
) -> SearchOut:
    """keepmem's find over memories, then mem0's filters and threshold."""
    check_request(scope, body)
    intake.whole_project(scope)
    filters = _with_entities(body.filters, body)
    test = compile_filter(filters)
    top_k = body.top_k or 10
    found = await search_service.find(
        session,
        scope,
        embedder=embedder,
        cache=cache,
        data=search_service.FindInput(
            query=body.query,
            tags={**pushdown(filters), "memory": ""},
            limit=100,
            stages="text" if body.keyword_search else "hybrid",
            include_superseded=body.latest_only is False,
            include_parts=False,
        ),
    )
    results: list[dict[str, Any]] = []
    for view, score in found.items:
        m = Memory.of(view)
        if m is None or not test(fields_of(m)):
            continue
        if body.threshold is not None and score < body.threshold:
            continue
        item = out(m, score=round(score, 6)).model_dump()
        if body.fields:
            item = {k: v for k, v in item.items() if k in body.fields or k == "id"}
        results.append(item)
        if len(results) >= top_k:
            break
    return SearchOut(results=results)


async def history_of(session: AsyncSession, scope: Scope, raw: str) -> list[HistoryOut]:
    """The memory's wordings, oldest first: ADD, then UPDATE (one per later wording)."""
    m = await held(session, scope, raw)
    entries, _ = await history.versions(session, scope, raw_id=m.id, limit=100)
    wordings = [(e.summary, e.date) for e in reversed(entries)] + [(m.statement, m.updated_at)]
    created = stamp(m.at)
    out_: list[HistoryOut] = []
    for i, (text, at) in enumerate(wordings):
        out_.append(
            HistoryOut(
                id=f"{m.id}@V{len(wordings) - 1 - i}",
                memory_id=m.id,
                old_memory=wordings[i - 1][0] if i else None,
                new_memory=text,
                event="UPDATE" if i else "ADD",
                user_id=m.user or None,
                metadata=metadata_of(m),
                created_at=created if i == 0 else at,
                updated_at=at,
            )
        )
    return out_


# -- writing --------------------------------------------------------------------------


def _metadata_tag(metadata: dict[str, Any]) -> str:
    text = json.dumps(metadata, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text) > MAX_METADATA:
        raise refuse(f"metadata is {len(text)} characters as JSON; the limit is {MAX_METADATA}")
    return text


def _owners(body: AddIn) -> dict[str, str | None]:
    """Who the messages belong to: top-level ids and v3's ``filters`` (which
    must agree)."""
    owners: dict[str, str | None] = {
        k: getattr(body, k) for k in ("user_id", "agent_id", "app_id", "run_id")
    }
    for key, value in (body.filters or {}).items():
        if key not in owners:
            raise refuse(
                f"filters.{key[:60]} is not an owner id (user_id, agent_id, app_id, run_id)"
            )
        if owners[key] is not None and owners[key] != value:
            raise refuse(f"{key} and filters.{key} differ")
        owners[key] = value
    run = owners["run_id"]
    if run is not None and not _THREAD.match(run):
        raise refuse("run_id: letters, digits and ._:@+=~- only, starting with a letter or digit")
    return owners


def _when(timestamp: int | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


async def add(
    session: AsyncSession,
    scope: Scope,
    *,
    body: AddIn,
    limits: Limits,
    embedder: Embedder,
    cache: QueryCache,
) -> AddOut:
    """Each message remembered verbatim (``infer: false``), or the messages
    handed to keepmem's memory formation (queued)."""
    check_request(scope, body, allowed=frozenset({"timestamp"}))
    intake.whole_project(scope)
    owners = _owners(body)
    if body.infer is False:
        return await _remember_each(session, scope, body, owners, limits, embedder, cache)
    for name, value in (("metadata", body.metadata), ("app_id", owners["app_id"])):
        if value is not None:
            raise refuse(
                f"{name} needs infer=false: the memories keepmem's extraction forms do not carry it"
            )
    if body.async_mode is False:
        raise refuse("async_mode=false is not supported with infer: extraction is queued")
    user, agent = owners["user_id"], owners["agent_id"]
    thread = (
        owners["run_id"] or "mem0-" + hashlib.sha256(f"{user}|{agent}".encode()).hexdigest()[:20]
    )
    batch = MessageBatch(
        messages=[
            MessageIn(role=m.role, content=m.content, name=m.name, time=_when(body.timestamp))
            for m in body.messages
        ],
        user_id=user,
        agent_id=agent,
        infer=True,
    )
    got = await intake.add_messages(session, scope, thread_id=thread, batch=batch, limits=limits)
    return AddOut(
        results=[],
        status="PENDING",
        message=f"{len(got.messages)} message(s) added to thread {thread}; keepmem's memory "
        "formation will read them (the memories appear once it has run)",
        thread_id=thread,
    )


async def _remember_each(
    session: AsyncSession,
    scope: Scope,
    body: AddIn,
    owners: dict[str, str | None],
    limits: Limits,
    embedder: Embedder,
    cache: QueryCache,
) -> AddOut:
    tags: dict[str, Any] = {}
    if owners["app_id"]:
        tags[APP_TAG] = owners["app_id"]
    if body.metadata is not None:
        tags[METADATA_TAG] = _metadata_tag(body.metadata)
    subject = next((v for v in owners.values() if v), None) or "user"
    events: list[AddEvent] = []
    for i, message in enumerate(body.messages):
        text = " ".join(message.content.split())
        if not text:
            raise refuse(f"messages[{i}].content is blank")
        if len(text) > MAX_TEXT:
            raise refuse(
                f"messages[{i}].content is {len(text)} characters; a memory holds {MAX_TEXT}"
            )
        done = await memories.remember(
            session,
            scope,
            body=RememberIn(
                statement=text,
                subject=subject,
                attribute="states",
                value=text[:500],
                kind="fact",
                single=False,
                valid_at=_when(body.timestamp),
                user_id=owners["user_id"],
                agent_id=owners["agent_id"],
                thread_id=owners["run_id"],
                tags=tags,
            ),
            limits=limits,
            embedder=embedder,
            cache=cache,
        )
        if done.op in ("noop", "update") and body.metadata is not None:
            await tagging.tag(
                session,
                scope,
                raw_id=done.memory.id,
                remove=[METADATA_TAG],  # a tag holds many values: replace, not add
                set_tags={METADATA_TAG: tags[METADATA_TAG]},
            )
        event = {"noop": "NONE", "update": "UPDATE"}.get(done.op, "ADD")
        events.append(
            AddEvent(
                id=done.memory.id,
                event=event,
                memory=done.memory.statement,
                data={"memory": done.memory.statement},
            )
        )
    return AddOut(results=events, status="SUCCEEDED", message=f"{len(events)} memories stored")


async def update(
    session: AsyncSession, scope: Scope, raw: str, *, body: UpdateIn, limits: Limits
) -> Mem0Memory:
    """A new wording (a new version of the memory's note) and / or new
    metadata (in place; ``{}`` clears it)."""
    check_request(scope, body)
    if body.text is None and body.metadata is None:
        raise refuse("give text, metadata or both")
    m = await held(session, scope, raw)
    if body.text is not None:
        text = " ".join(body.text.split())
        if not text:
            raise refuse("text is blank")
        if not m.current:
            raise Conflict(f"memory {m.id} was superseded by {m.superseded_by}: update that one")
        if text != m.statement:
            c = Candidate(
                kind=m.kind,
                subject=m.subject,
                attribute=m.attribute,
                # A verbatim memory's value is its text; another keeps its slot's value.
                value=text[:500] if m.attribute == "states" else m.value,
                statement=text,
                confidence=1.0,
                single=m.single,
                at=m.at,
                negated=m.negated,
            )
            await reconcile.restate(session, scope, m.id, c, limits=limits)
    if body.metadata is not None:
        if body.metadata:
            meta = {METADATA_TAG: _metadata_tag(body.metadata)}
            await tagging.tag(session, scope, raw_id=m.id, remove=[METADATA_TAG], set_tags=meta)
        else:
            await tagging.tag(session, scope, raw_id=m.id, remove=[METADATA_TAG])
    return out(await held(session, scope, m.id))


async def delete(session: AsyncSession, scope: Scope, raw: str, *, linked: bool) -> int:
    """Delete a memory (with ``linked``, the memories it superseded, and
    theirs); the number deleted."""
    m = await held(session, scope, raw)
    gone = {m.id}
    await history.delete(session, scope, raw_id=m.id)
    todo = [m.id] if linked else []
    while todo and len(gone) < SCAN:
        older = await memories.memories(
            session, scope, tags={"superseded_by": todo.pop()}, include_superseded=True, limit=1000
        )
        for o in older:
            if o.id not in gone:
                gone.add(o.id)
                await history.delete(session, scope, raw_id=o.id)
                todo.append(o.id)
    return len(gone)


async def delete_all(session: AsyncSession, scope: Scope, *, owners: dict[str, str | None]) -> int:
    """Every memory (current or superseded) of the owners named; at least one."""
    intake.whole_project(scope)
    named = {k: v for k, v in owners.items() if v is not None}
    if not named:
        raise refuse("delete_all needs at least one of user_id, agent_id, app_id, run_id")
    found = await scan(session, scope, {"AND": [{k: v} for k, v in named.items()]}, superseded=True)
    for m in found:
        await history.delete(session, scope, raw_id=m.id)
    return len(found)


async def batch_update(
    session: AsyncSession, scope: Scope, *, items: list[BatchUpdateItem], limits: Limits
) -> int:
    """Every update or none: a missing memory fails the batch (404)."""
    for item in items:
        body = UpdateIn(text=item.text, metadata=item.metadata)
        await update(session, scope, item.memory_id, body=body, limits=limits)
    return len(items)


async def batch_delete(session: AsyncSession, scope: Scope, *, items: list[BatchDeleteItem]) -> int:
    """Every delete or none: a missing memory fails the batch (404)."""
    for item in items:
        await delete(session, scope, item.memory_id, linked=False)
    return len(items)
