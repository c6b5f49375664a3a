"""Threads of messages and the memories formed from them: the methods
``Keepmem`` and ``AsyncKeepmem`` take from ``Memories`` and
``AsyncMemories`` (the calls are described once, in ``_calls``).

Reads are retried like every read; adding messages, ``remember`` and the
settings are writes and are never repeated (a repeated batch of messages
would be stored, and read by extraction, twice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from keepmem_client import _calls as calls
from keepmem_client import _models as m
from keepmem_client._calls import Tags

if TYPE_CHECKING:
    import httpx

    from keepmem_client._base import Call

T = TypeVar("T")


class Memories:
    """Threads and memories for the sync client."""

    if TYPE_CHECKING:  # given by the client this is mixed into

        def _send(self, call: Call[Any]) -> httpx.Response: ...

        def _run(self, call: Call[T]) -> T: ...

    def add_messages(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]], *,
        user_id: str | None = None, agent_id: str | None = None, infer: bool = True,
    ) -> m.MessagesAdded:  # fmt: skip
        """Add 1-100 messages (``{"role", "content", "name"?, "time"?, "tags"?}``)
        to a thread, made on its first batch. Unless ``infer`` is false,
        extraction reads them and forms memories. Never retried."""
        return self._run(
            calls.add_messages(thread_id, messages, user_id=user_id, agent_id=agent_id, infer=infer)
        )

    def threads(
        self, *, user_id: str | None = None, agent_id: str | None = None,
        limit: int | None = None, offset: int | None = None,
    ) -> list[m.Thread]:  # fmt: skip
        """The project's threads, most recently active first."""
        return self._run(
            calls.threads(user_id=user_id, agent_id=agent_id, limit=limit, offset=offset)
        )

    def thread(self, thread_id: str) -> m.Thread:
        """One thread with its counts (NotFoundError if none in this project)."""
        return self._run(calls.thread(thread_id))

    def delete_thread(self, thread_id: str, *, memories: bool = False) -> m.ThreadDeleted:
        """Forget a thread: its messages, and with ``memories`` the memories
        formed from it (NotFoundError if none in this project)."""
        return self._run(calls.delete_thread(thread_id, memories=memories))

    def thread_messages(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> m.MessagePage:
        """A page of a thread's messages, oldest first; pass ``next_cursor``
        back as ``cursor`` for the next page."""
        return self._run(calls.thread_messages(thread_id, limit=limit, cursor=cursor))

    def thread_memories(
        self, thread_id: str, *, as_of: str | None = None,
        include_superseded: bool | None = None, limit: int | None = None,
    ) -> list[m.Memory]:  # fmt: skip
        """The memories formed from one thread: current ones, those believed
        at ``as_of`` (ISO-8601), or all of them."""
        return self._run(
            calls.thread_memories(
                thread_id, as_of=as_of, include_superseded=include_superseded, limit=limit
            )
        )

    def thread_context(
        self, thread_id: str, *, query: str | None = None, token_budget: int | None = None
    ) -> m.ThreadContext:
        """One block for a prompt: the current memories of the thread's user
        (the most relevant to ``query`` first), then the past messages that
        answer it best, within ``token_budget``."""
        return self._run(calls.thread_context(thread_id, query=query, token_budget=token_budget))

    def memories(
        self, *, user_id: str | None = None, agent_id: str | None = None,
        subject: str | None = None, kind: str | None = None, as_of: str | None = None,
        include_superseded: bool | None = None, limit: int | None = None,
        offset: int | None = None,
    ) -> list[m.Memory]:  # fmt: skip
        """Memories, newest first: current ones unless ``as_of`` or
        ``include_superseded``; all of the project's when no owner is named."""
        return self._run(
            calls.memories(
                user_id=user_id,
                agent_id=agent_id,
                subject=subject,
                kind=kind,
                as_of=as_of,
                include_superseded=include_superseded,
                limit=limit,
                offset=offset,
            )
        )

    def memory(self, memory_id: str) -> m.MemoryDetail:
        """One memory (``mem/...``) with its earlier wordings, its source
        messages and the history of its slot."""
        return self._run(calls.memory(memory_id))

    def remember(
        self, statement: str, *, subject: str | None = None, attribute: str | None = None,
        value: str | None = None, kind: str | None = None, single: bool | None = None,
        negated: bool | None = None, valid_at: str | None = None, user_id: str | None = None,
        agent_id: str | None = None, thread_id: str | None = None, tags: Tags | None = None,
    ) -> m.Remembered:  # fmt: skip
        """Write a memory without extraction, reconciled with what is
        believed: said again, it updates (or leaves) the memory instead of
        adding a copy (``op`` says which). Never retried."""
        return self._run(
            calls.remember(
                statement,
                subject=subject,
                attribute=attribute,
                value=value,
                kind=kind,
                single=single,
                negated=negated,
                valid_at=valid_at,
                user_id=user_id,
                agent_id=agent_id,
                thread_id=thread_id,
                tags=tags,
            )
        )

    def memory_settings(self) -> m.MemorySettings:
        """The project's extraction budget and the server's extraction model."""
        return self._run(calls.memory_settings())

    def set_memory_settings(self, llm_tokens_per_day: int | None) -> m.MemorySettings:
        """Set the project's extraction budget in tokens per UTC day (None:
        the server's); never above the server's own."""
        return self._run(calls.set_memory_settings(llm_tokens_per_day))

    def memory_spend(self) -> m.MemorySpend:
        """Today's (UTC) extraction calls and tokens against the budget."""
        return self._run(calls.memory_spend())


class AsyncMemories:
    """``Memories`` for the async client: the same methods, awaited."""

    if TYPE_CHECKING:  # given by the client this is mixed into

        async def _send(self, call: Call[Any]) -> httpx.Response: ...

        async def _run(self, call: Call[T]) -> T: ...

    async def add_messages(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]], *,
        user_id: str | None = None, agent_id: str | None = None, infer: bool = True,
    ) -> m.MessagesAdded:  # fmt: skip
        """Add 1-100 messages to a thread; never retried."""
        return await self._run(
            calls.add_messages(thread_id, messages, user_id=user_id, agent_id=agent_id, infer=infer)
        )

    async def threads(
        self, *, user_id: str | None = None, agent_id: str | None = None,
        limit: int | None = None, offset: int | None = None,
    ) -> list[m.Thread]:  # fmt: skip
        """The project's threads, most recently active first."""
        return await self._run(
            calls.threads(user_id=user_id, agent_id=agent_id, limit=limit, offset=offset)
        )

    async def thread(self, thread_id: str) -> m.Thread:
        """One thread with its counts (NotFoundError if none in this project)."""
        return await self._run(calls.thread(thread_id))

    async def delete_thread(self, thread_id: str, *, memories: bool = False) -> m.ThreadDeleted:
        """Forget a thread: its messages, and with ``memories`` the memories
        formed from it (NotFoundError if none in this project)."""
        return await self._run(calls.delete_thread(thread_id, memories=memories))

    async def thread_messages(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> m.MessagePage:
        """A page of a thread's messages, oldest first."""
        return await self._run(calls.thread_messages(thread_id, limit=limit, cursor=cursor))

    async def thread_memories(
        self, thread_id: str, *, as_of: str | None = None,
        include_superseded: bool | None = None, limit: int | None = None,
    ) -> list[m.Memory]:  # fmt: skip
        """The memories formed from one thread."""
        return await self._run(
            calls.thread_memories(
                thread_id, as_of=as_of, include_superseded=include_superseded, limit=limit
            )
        )

    async def thread_context(
        self, thread_id: str, *, query: str | None = None, token_budget: int | None = None
    ) -> m.ThreadContext:
        """One block for a prompt: what is known, then the messages that answer ``query``."""
        return await self._run(
            calls.thread_context(thread_id, query=query, token_budget=token_budget)
        )

    async def memories(
        self, *, user_id: str | None = None, agent_id: str | None = None,
        subject: str | None = None, kind: str | None = None, as_of: str | None = None,
        include_superseded: bool | None = None, limit: int | None = None,
        offset: int | None = None,
    ) -> list[m.Memory]:  # fmt: skip
        """Memories, newest first: current ones unless ``as_of`` or ``include_superseded``."""
        return await self._run(
            calls.memories(
                user_id=user_id,
                agent_id=agent_id,
                subject=subject,
                kind=kind,
                as_of=as_of,
                include_superseded=include_superseded,
                limit=limit,
                offset=offset,
            )
        )

    async def memory(self, memory_id: str) -> m.MemoryDetail:
        """One memory with its versions, sources and slot history."""
        return await self._run(calls.memory(memory_id))

    async def remember(
        self, statement: str, *, subject: str | None = None, attribute: str | None = None,
        value: str | None = None, kind: str | None = None, single: bool | None = None,
        negated: bool | None = None, valid_at: str | None = None, user_id: str | None = None,
        agent_id: str | None = None, thread_id: str | None = None, tags: Tags | None = None,
    ) -> m.Remembered:  # fmt: skip
        """Write a memory without extraction, reconciled; never retried."""
        return await self._run(
            calls.remember(
                statement,
                subject=subject,
                attribute=attribute,
                value=value,
                kind=kind,
                single=single,
                negated=negated,
                valid_at=valid_at,
                user_id=user_id,
                agent_id=agent_id,
                thread_id=thread_id,
                tags=tags,
            )
        )

    async def memory_settings(self) -> m.MemorySettings:
        """The project's extraction budget and the server's extraction model."""
        return await self._run(calls.memory_settings())

    async def set_memory_settings(self, llm_tokens_per_day: int | None) -> m.MemorySettings:
        """Set the project's extraction budget (None: the server's)."""
        return await self._run(calls.set_memory_settings(llm_tokens_per_day))

    async def memory_spend(self) -> m.MemorySpend:
        """Today's (UTC) extraction calls and tokens against the budget."""
        return await self._run(calls.memory_spend())
