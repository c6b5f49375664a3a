"""Memories read back and written by agents: a thread's or a user's
memories (current, or as of a time), one memory with its versions and
sources, ``remember`` (an agent's own memory, reconciled: a restatement
updates instead of adding), threads and their messages, and the "context
for this thread" block."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, Conflict, NoteNotFound
from app.kit.timeutil import keep_ts, parse_timestamp, utcnow
from app.memories import reconcile, rules
from app.memories import repository as repo
from app.memories.intake import thread_note_id, whole_project
from app.memories.model import PREFIX, Candidate, Memory, canonical_attribute, stamp
from app.memories.schemas import (
    ContextMessage,
    ContextOut,
    MemoryDetail,
    MemoryOut,
    MessageList,
    MessageOut,
    RememberIn,
    RememberOut,
    SourceOut,
    SpendOut,
    ThreadDeleted,
    ThreadOut,
    VersionOut,
)
from app.memories.settings import budget_of
from app.notes import history, reading
from app.providers.embedding.base import Embedder, QueryCache
from app.providers.extraction import Said
from app.search import service as search
from app.settings import Limits
from app.tenancy import Scope
from app.usage import service as spend

SCAN = 1000  # memories read per page when filtering by belief
MAX_SCAN = 20_000


def out(m: Memory) -> MemoryOut:
    return MemoryOut(
        id=m.id,
        kind=m.kind,
        subject=m.subject,
        attribute=m.attribute,
        value=m.value,
        statement=m.statement,
        confidence=m.confidence,
        certainty=m.certainty,
        negated=m.negated,
        current=m.current,
        valid_at=stamp(m.at),
        superseded_by=m.superseded_by,
        superseded_at=m.superseded_at,
        sources=m.sources,
        thread_id=m.thread,
        user_id=m.user,
        agent_id=m.agent,
        updated_at=m.updated_at,
    )


def when(raw: str | None, name: str = "as_of") -> datetime | None:
    if raw is None:
        return None
    try:
        return parse_timestamp(raw)
    except ValueError as exc:
        raise BadRequest(f"invalid {name} {raw[:80]!r}: use ISO-8601 ({exc})") from exc


async def memories(
    session: AsyncSession,
    scope: Scope,
    *,
    tags: dict[str, str],
    as_of: datetime | None = None,
    include_superseded: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> list[Memory]:
    """Memories matching ``tags``, newest belief first: the current ones, or
    those believed at ``as_of``, or all of them."""
    whole_project(scope)
    wanted: list[Memory] = []
    cursor: str | None = None
    scanned = 0
    while scanned < MAX_SCAN:
        page = await reading.list_notes(
            session,
            scope,
            query=reading.ListInput(
                tags=tags, tag_keys=["memory"], limit=SCAN, order_by="created", cursor=cursor
            ),
            limits=Limits(),
        )
        scanned += len(page.items)
        for view in page.items:
            m = Memory.of(view)
            if m is None:
                continue
            if include_superseded or (m.believed_at(as_of) if as_of else m.current):
                wanted.append(m)
        if len(wanted) >= offset + limit or page.next_cursor is None:
            break
        cursor = page.next_cursor
    return wanted[offset : offset + limit]


async def memory(session: AsyncSession, scope: Scope, memory_id: str) -> MemoryDetail:
    """One memory: its versions (earlier wordings), its source messages and
    the whole history of its slot."""
    whole_project(scope)
    if not memory_id.startswith(PREFIX):
        raise NoteNotFound(f"memory not found: {memory_id}")
    m = Memory.of(await reading.get(session, scope, raw_id=memory_id))
    if m is None:
        raise NoteNotFound(f"memory not found: {memory_id}")
    entries, _ = await history.versions(session, scope, raw_id=m.id, limit=100)
    sources = []
    for source in m.sources[:50]:
        try:
            v = await reading.get(session, scope, raw_id=source)
            sources.append(
                SourceOut(id=v.id, summary=v.summary, created_at=v.created_at, exists=True)
            )
        except NoteNotFound:
            sources.append(SourceOut(id=source, summary="", created_at="", exists=False))
    slot = reconcile.ordered(await reconcile.slot_memories(session, scope, _as_candidate(m)))
    return MemoryDetail(
        **out(m).model_dump(),
        versions=[VersionOut(version=e.offset, statement=e.summary, at=e.date) for e in entries],
        source_messages=sources,
        history=[out(x) for x in slot],
    )


def _as_candidate(m: Memory) -> Candidate:
    return Candidate(
        kind=m.kind,
        subject=m.subject,
        attribute=m.attribute,
        value=m.value,
        statement=m.statement,
        confidence=m.confidence,
        single=m.single,
        at=m.at,
        negated=m.negated,
    )


def _parsed(body: RememberIn, subject: str) -> Candidate | None:
    """A memory given only as a sentence: the rules read its subject,
    attribute and value when they can (then a restatement is found by its
    slot); else the sentence is its own value."""
    found = rules.extract([Said(1, subject, "user", body.statement, "")])
    if not found:
        return None
    p = found[0]
    return Candidate(
        kind=p.kind,
        subject=subject,
        attribute=p.attribute,
        value=p.value,
        statement=body.statement,
        confidence=1.0,
        single=p.single,
        at=utcnow(),
        negated=p.negated,
    )


NEAR = 0.9  # cosine (MiniLM) above which two statements say the same, names and numbers alike
_TOKEN = re.compile(r"[\w']+")


def _names(statement: str) -> set[str]:
    """Numbers and capitalised words past the first: what a paraphrase keeps
    and a contradiction ("lives in Berlin" / "lives in Munich") changes."""
    tokens = _TOKEN.findall(statement)
    return {
        t.casefold()
        for i, t in enumerate(tokens)
        if any(ch.isdigit() for ch in t) or (i > 0 and t[0].isupper())
    }


async def _restated(
    session: AsyncSession, scope: Scope, c: Candidate, embedder: Embedder, cache: QueryCache
) -> Memory | None:
    """A current memory of the subject that says what ``c`` says in other
    words: close in meaning, with the same names and numbers. Only embedded
    memories can be found so (a memory is embedded by the worker, seconds
    after it is written); the same words are found by their slot at once."""
    found = await search.find(
        session,
        scope,
        embedder=embedder,
        cache=cache,
        data=search.FindInput(
            query=c.statement, tags={"subject": c.subject, "memory": ""}, stages="vector",
            limit=5, explain=True,
        ),
    )  # fmt: skip
    for (view, _), (why, _) in zip(found.items, found.explained or [], strict=False):
        m = Memory.of(view)
        if m is None or not m.current or m.negated != c.negated or why.vector is None:
            continue
        if why.vector >= NEAR and _names(m.statement) == _names(c.statement):
            return m
    return None


async def remember(
    session: AsyncSession,
    scope: Scope,
    *,
    body: RememberIn,
    limits: Limits,
    embedder: Embedder,
    cache: QueryCache,
) -> RememberOut:
    """An agent's own memory, reconciled with what is believed: said again,
    it updates the memory (or changes nothing) instead of adding a copy;
    a new value of a one-valued attribute supersedes the old one."""
    whole_project(scope)
    subject = " ".join((body.subject or body.user_id or "user").split())
    at = when(body.valid_at, "valid_at") or utcnow()
    if body.attribute and body.value:
        attribute = canonical_attribute(body.attribute)
        single = body.single if body.single is not None else body.kind == "fact"
        c = Candidate(
            kind=body.kind,
            subject=subject,
            attribute=attribute or "states",
            value=" ".join(body.value.split()),
            statement=" ".join(body.statement.split()),
            confidence=1.0,
            single=single,
            at=at,
            negated=body.negated,
        )
    elif body.attribute or body.value:
        raise BadRequest("give attribute and value together, or neither")
    else:
        parsed = _parsed(body, subject)
        c = parsed or Candidate(
            kind=body.kind,
            subject=subject,
            attribute="states",
            value=" ".join(body.statement.split())[:500],
            statement=" ".join(body.statement.split()),
            confidence=1.0,
            single=False,
            at=at,
            negated=body.negated,
        )
        c.at, c.kind = at, body.kind if parsed is None else c.kind
    if not c.attribute:
        raise BadRequest("attribute has no letters or digits")
    c.thread, c.user, c.agent = body.thread_id or "", body.user_id or "", body.agent_id or ""
    c.tags = dict(body.tags or {})
    same = None
    if not body.attribute:
        same = await _restated(session, scope, c, embedder, cache)
    if same is not None:
        c.value = same.value if c.attribute == "states" else c.value
        plan = await reconcile.restate(session, scope, same.id, c, limits=limits)
    else:
        plan = await reconcile.apply(session, scope, c, limits=limits)
    m = Memory.of(await reading.get(session, scope, raw_id=plan.memory_id))
    if m is None:  # the memory's tags were edited meanwhile; the id still stands
        raise NoteNotFound(f"memory not found: {plan.memory_id}")
    return RememberOut(
        op=plan.op,
        memory=out(m),
        superseded=[mid for mid, to, _ in plan.links if to == c.id],
    )


async def restate(
    session: AsyncSession, scope: Scope, *, memory_id: str, statement: str, limits: Limits
) -> RememberOut:
    """A new wording of a memory the caller names (a distillation grounding
    it again): a new version of its note, its slot, value and time as they
    were, so nothing else is reconciled. Only a current memory is restated."""
    whole_project(scope)
    if not memory_id.startswith(PREFIX):
        raise NoteNotFound(f"memory not found: {memory_id}")
    m = Memory.of(await reading.get(session, scope, raw_id=memory_id))
    if m is None:
        raise NoteNotFound(f"memory not found: {memory_id}")
    if not m.current:
        raise Conflict(f"memory {m.id} was superseded by {m.superseded_by}: restate that one")
    c = _as_candidate(m)
    c.statement = " ".join(statement.split())
    if c.statement == m.statement:
        return RememberOut(op="noop", memory=out(m), superseded=[])
    await reconcile.restate(session, scope, m.id, c, limits=limits)
    again = Memory.of(await reading.get(session, scope, raw_id=m.id))
    if again is None:
        raise NoteNotFound(f"memory not found: {m.id}")
    return RememberOut(op="update", memory=out(again), superseded=[])


def thread_out(row: Any, waiting: int) -> ThreadOut:
    return ThreadOut(
        id=row.id,
        user_id=row.user_id,
        agent_id=row.agent_id,
        created_at=keep_ts(row.created_at),
        last_message_at=keep_ts(row.last_message_at),
        messages=row.next_seq,
        extracted=row.extracted_seq,
        waiting=waiting,
        memories_made=row.memories_made,
    )


async def held(session: AsyncSession, scope: Scope, thread_id: str) -> Any:
    """The thread's row, or a 404 (another tenant's or project's included)."""
    whole_project(scope)
    row = await repo.thread(session, scope, thread_id)
    if row is None:
        raise NoteNotFound(f"thread not found: {thread_id}")
    return row


async def thread(session: AsyncSession, scope: Scope, thread_id: str) -> ThreadOut:
    row = await held(session, scope, thread_id)
    return thread_out(row, await repo.inbox_size(session, scope, thread_id=thread_id))


async def threads(
    session: AsyncSession,
    scope: Scope,
    *,
    user_id: str | None,
    agent_id: str | None,
    limit: int,
    offset: int,
) -> list[ThreadOut]:
    whole_project(scope)
    rows = await repo.threads(
        session, scope, user_id=user_id, agent_id=agent_id, limit=limit, offset=offset
    )
    return [thread_out(r, await repo.inbox_size(session, scope, thread_id=r.id)) for r in rows]


async def _delete_tagged(
    session: AsyncSession, scope: Scope, tags: dict[str, str], key: str
) -> int:
    deleted = 0
    while True:
        page = await reading.list_notes(
            session,
            scope,
            query=reading.ListInput(tags=tags, tag_keys=[key], limit=SCAN),
            limits=Limits(),
        )
        for view in page.items:
            await history.delete(session, scope, raw_id=view.id)
            deleted += 1
        if len(page.items) < SCAN:
            return deleted


async def delete_thread(
    session: AsyncSession, scope: Scope, thread_id: str, *, memories: bool
) -> ThreadDeleted:
    """Forget a thread at its user's request: its messages (with their
    versions), its record and unread inbox, and with ``memories`` the
    memories formed from it. Not a model's decision: nothing else ever
    deletes a memory."""
    await held(session, scope, thread_id)
    gone = await _delete_tagged(session, scope, {"thread": thread_id}, "role")
    made = await _delete_tagged(session, scope, {"thread": thread_id}, "memory") if memories else 0
    await repo.delete_thread(session, scope, thread_id)
    return ThreadDeleted(thread_id=thread_id, messages=gone, memories=made)


async def messages(
    session: AsyncSession, scope: Scope, thread_id: str, *, limit: int, cursor: str | None
) -> MessageList:
    """A thread's messages, oldest first."""
    await held(session, scope, thread_id)
    page = await reading.list_notes(
        session,
        scope,
        # Message ids carry their number (thread/<id>/000042): by id is in order.
        query=reading.ListInput(
            prefix=thread_note_id(thread_id) + "/", tags={"thread": thread_id},
            tag_keys=["role"], limit=limit, cursor=cursor, order_by="id",
        ),
        limits=Limits(),
    )  # fmt: skip
    items = page.items
    return MessageList(
        messages=[
            MessageOut(
                id=v.id,
                role=str(v.tags.get("role", "")),
                speaker=str(v.tags.get("speaker", "")),
                content=v.summary,
                created_at=v.created_at,
            )
            for v in items
        ],
        next_cursor=page.next_cursor,
    )


def _tokens(text: str) -> int:
    return -(-len(text) // 4)


async def context(
    session: AsyncSession,
    scope: Scope,
    thread_id: str,
    *,
    query: str | None,
    token_budget: int,
    embedder: Embedder,
    cache: QueryCache,
) -> ContextOut:
    """What an agent should know before it answers in this thread: the
    current memories of its user (or of the thread, without one), the most
    relevant first when a query is given, then the past messages that
    answer the query best (or the latest ones), under ``token_budget``."""
    t = await held(session, scope, thread_id)
    owner = {"user": t.user_id} if t.user_id else {"thread": thread_id}
    known: list[Memory] = []
    if query:
        found = await search.find(
            session,
            scope,
            embedder=embedder,
            cache=cache,
            data=search.FindInput(query=query, tags={**owner, "memory": ""}, limit=50),
        )
        known = [m for v, _ in found.items if (m := Memory.of(v)) is not None]
    seen = {m.id for m in known}
    rest = await memories(session, scope, tags=owner, limit=200)
    known += [m for m in rest if m.id not in seen]
    said: list[ContextMessage] = []
    if query:
        found = await search.find(
            session,
            scope,
            embedder=embedder,
            cache=cache,
            data=search.FindInput(query=query, tags={"thread": thread_id, "role": ""}, limit=20),
        )
        said = [
            ContextMessage(id=v.id, summary=v.summary, created_at=v.created_at, score=s)
            for v, s in found.items
        ]
    else:
        latest = await messages(session, scope, thread_id, limit=20, cursor=None)
        said = [
            ContextMessage(id=m.id, summary=m.content, created_at=m.created_at, score=0.0)
            for m in latest.messages
        ]
    return _pack(thread_id, known, said, token_budget)


def _section(head: str, lines: list[str], budget: int) -> tuple[list[str], int, int]:
    """As many of ``lines`` as fit in ``budget`` tokens under ``head``: the
    block's lines, how many were kept, and the tokens they take."""
    out: list[str] = []
    used = 0
    for line in lines:
        cost = _tokens(line) + (0 if out else _tokens(head))
        if used + cost > budget:
            break
        out += [line] if out else [head, line]
        used += cost
    return out, max(len(out) - 1, 0), used


def _pack(
    thread_id: str, held: list[Memory], said: list[ContextMessage], budget: int
) -> ContextOut:
    known = [
        f"- {m.statement}{' (unconfirmed)' if m.certainty == 'candidate' else ''} "
        f"[since {stamp(m.at)[:10]}]"
        for m in held
    ]
    first, n_held, used = _section("## What is known", known, budget)
    lines = [f"- [{s.created_at[:10]}] {s.summary}" for s in said]
    second, n_said, more = _section("## Relevant messages", lines, budget - used)
    return ContextOut(
        thread_id=thread_id,
        memories=[out(m) for m in held[:n_held]],
        messages=said[:n_said],
        context="\n".join(first + second),
        tokens=used + more,
        truncated=n_held < len(held) or n_said < len(said),
    )


async def spend_today(session: AsyncSession, scope: Scope, *, server_budget: int) -> SpendOut:
    """Today's (UTC) extraction calls and tokens against the project's budget."""
    whole_project(scope)
    day = utcnow().date()
    row = await spend.spend_on(session, scope, day, use="memories")
    return SpendOut(
        day=day.isoformat(),
        calls=row.calls if row else 0,
        tokens_in=row.tokens_in if row else 0,
        tokens_out=row.tokens_out if row else 0,
        refused=row.refused if row else 0,
        budget=await budget_of(session, scope, server_budget),
    )
