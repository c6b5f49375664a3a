"""Threads of messages (``/v1/threads``) and the memories formed from them
(``/v1/memories``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from app.deps import LimitsDep, ReadScope, SessionDep, SettingsDep, WriteScope
from app.memories import intake, service
from app.memories import settings as project_settings
from app.memories.model import KINDS
from app.memories.schemas import (
    THREAD_ID,
    ContextOut,
    IntakeOut,
    MemoryDetail,
    MemoryList,
    MemorySettingsIn,
    MemorySettingsOut,
    MessageBatch,
    MessageList,
    RememberIn,
    RememberOut,
    SpendOut,
    ThreadDeleted,
    ThreadList,
    ThreadOut,
)
from app.wire import MAX_OFFSET, api_router

router = api_router(prefix="/v1", tags=["memories"])

ThreadId = Annotated[
    str, Path(min_length=1, max_length=200, pattern=THREAD_ID, description="The thread's id.")
]
Owner = Annotated[str | None, Query(min_length=1, max_length=200)]
AsOf = Annotated[
    str | None,
    Query(max_length=64, description="ISO-8601: the memories believed at that time."),
]
Superseded = Annotated[
    bool, Query(description="Every memory, current or superseded (as_of is then ignored).")
]


@router.post("/threads/{thread_id}/messages", status_code=202, response_model=IntakeOut)
async def add_messages(
    thread_id: ThreadId,
    body: MessageBatch,
    scope: WriteScope,
    session: SessionDep,
    limits: LimitsDep,
) -> IntakeOut:
    """Add 1-100 messages to a thread (made on its first batch). Each becomes
    a note (tags ``thread``, ``role``, ``speaker``, ``in-reply-to`` the
    message before; content ``Name: text`` when a name is given), sanitised
    as every note is. Unless ``infer`` is false, one extraction job reads
    the batch (with any other batch of the thread that arrives before it
    runs) and forms memories from it. A refused message refuses the batch:
    nothing of it is stored."""
    return await intake.add_messages(session, scope, thread_id=thread_id, batch=body, limits=limits)


@router.get("/threads", response_model=ThreadList)
async def list_threads(
    scope: ReadScope,
    session: SessionDep,
    user_id: Owner = None,
    agent_id: Owner = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> ThreadList:
    """The project's threads, most recently active first."""
    found = await service.threads(
        session, scope, user_id=user_id, agent_id=agent_id, limit=limit, offset=offset
    )
    return ThreadList(threads=found)


@router.get("/threads/{thread_id}", response_model=ThreadOut)
async def get_thread(thread_id: ThreadId, scope: ReadScope, session: SessionDep) -> ThreadOut:
    """A thread: its user and agent, counts, and how far extraction has read."""
    return await service.thread(session, scope, thread_id)


@router.delete("/threads/{thread_id}", response_model=ThreadDeleted)
async def delete_thread(
    thread_id: ThreadId,
    scope: WriteScope,
    session: SessionDep,
    memories: Annotated[
        bool, Query(description="Also delete the memories formed from this thread.")
    ] = False,
) -> ThreadDeleted:
    """Forget a thread: its messages (notes, with their versions), its record
    and what waits for extraction; with ``memories=true`` also the memories
    formed from it (others' memories that cite its messages keep them as
    sources that no longer exist)."""
    return await service.delete_thread(session, scope, thread_id, memories=memories)


@router.get("/threads/{thread_id}/messages", response_model=MessageList)
async def thread_messages(
    thread_id: ThreadId,
    scope: ReadScope,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
) -> MessageList:
    """A thread's messages, oldest first (``next_cursor`` for the next page)."""
    return await service.messages(session, scope, thread_id, limit=limit, cursor=cursor)


@router.get("/threads/{thread_id}/memories", response_model=MemoryList)
async def thread_memories(
    thread_id: ThreadId,
    scope: ReadScope,
    session: SessionDep,
    as_of: AsOf = None,
    include_superseded: Superseded = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MemoryList:
    """The memories formed from this thread: current ones (or as of a time)."""
    await service.held(session, scope, thread_id)
    found = await service.memories(
        session,
        scope,
        tags={"thread": thread_id},
        as_of=service.when(as_of),
        include_superseded=include_superseded,
        limit=limit,
    )
    return MemoryList(memories=[service.out(m) for m in found], as_of=as_of)


@router.get("/threads/{thread_id}/context", response_model=ContextOut)
async def thread_context(
    thread_id: ThreadId,
    request: Request,
    scope: ReadScope,
    session: SessionDep,
    query: Annotated[str | None, Query(max_length=2000)] = None,
    token_budget: Annotated[int, Query(ge=50, le=100_000)] = 1500,
) -> ContextOut:
    """What an agent should know before answering in this thread, as one
    block under ``token_budget`` (about 4 characters a token): the current
    memories of the thread's user (or of the thread), the most relevant to
    ``query`` first, then the past messages that answer it best (without a
    query: the latest ones). Candidates of the offline rules are marked
    unconfirmed."""
    return await service.context(
        session,
        scope,
        thread_id,
        query=query,
        token_budget=token_budget,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
    )


@router.get("/memories", response_model=MemoryList)
async def list_memories(
    scope: ReadScope,
    session: SessionDep,
    user_id: Owner = None,
    agent_id: Owner = None,
    subject: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    kind: Annotated[str | None, Query(pattern="^(" + "|".join(KINDS) + ")$")] = None,
    as_of: AsOf = None,
    include_superseded: Superseded = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> MemoryList:
    """Memories, newest first: a user's, an agent's or a subject's (all when
    none is named); current ones unless ``as_of`` or ``include_superseded``."""
    tags = {
        k: v
        for k, v in (("user", user_id), ("agent", agent_id), ("subject", subject), ("memory", kind))
        if v
    }
    found = await service.memories(
        session,
        scope,
        tags=tags,
        as_of=service.when(as_of),
        include_superseded=include_superseded,
        limit=limit,
        offset=offset,
    )
    return MemoryList(memories=[service.out(m) for m in found], as_of=as_of)


@router.post("/memories", response_model=RememberOut)
async def remember(
    body: RememberIn, request: Request, scope: WriteScope, session: SessionDep, limits: LimitsDep
) -> RememberOut:
    """Remember something the agent decided itself (no extraction): with
    ``attribute`` and ``value`` it fills that slot of ``subject`` (default:
    ``user_id``, else "user"); with only a ``statement`` the rules read its
    slot when they can. Said again (same slot and value, or the same meaning
    with the same names and numbers) it updates the memory instead of
    adding one; a new value of a one-valued attribute supersedes the old."""
    return await service.remember(
        session,
        scope,
        body=body,
        limits=limits,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
    )


@router.get("/memories/settings", response_model=MemorySettingsOut)
async def get_settings(
    scope: ReadScope, session: SessionDep, settings: SettingsDep
) -> MemorySettingsOut:
    """The project's extraction budget and the server's extraction model."""
    intake.whole_project(scope)
    budget = await project_settings.budget_of(session, scope, settings.memory_llm_tokens_per_day)
    return MemorySettingsOut(llm_tokens_per_day=budget, provider=settings.memory_llm_provider)


@router.patch("/memories/settings", response_model=MemorySettingsOut)
async def patch_settings(
    body: MemorySettingsIn, scope: WriteScope, session: SessionDep, settings: SettingsDep
) -> MemorySettingsOut:
    """Set the project's extraction budget (tokens per UTC day; null: the
    server's). Never above the server's own."""
    intake.whole_project(scope)
    await project_settings.update(session, scope, llm_tokens_per_day=body.llm_tokens_per_day)
    budget = await project_settings.budget_of(session, scope, settings.memory_llm_tokens_per_day)
    return MemorySettingsOut(llm_tokens_per_day=budget, provider=settings.memory_llm_provider)


@router.get("/memories/spend", response_model=SpendOut)
async def spend(scope: ReadScope, session: SessionDep, settings: SettingsDep) -> SpendOut:
    """Today's (UTC) extraction calls and tokens, and the budget they count against."""
    return await service.spend_today(
        session, scope, server_budget=settings.memory_llm_tokens_per_day
    )


@router.get("/memories/{memory_id:path}", response_model=MemoryDetail)
async def get_memory(memory_id: str, scope: ReadScope, session: SessionDep) -> MemoryDetail:
    """One memory (ids start ``mem/``): its earlier wordings (versions), the
    messages it came from, and every memory of its slot, oldest first."""
    return await service.memory(session, scope, memory_id)
