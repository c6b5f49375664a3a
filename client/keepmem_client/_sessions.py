"""Coding-agent sessions and collections: the methods ``Keepmem`` and
``AsyncKeepmem`` take from ``Sessions`` and ``AsyncSessions`` (the calls
are described once, in ``_calls``).

Reads are retried like every read; recording events, checkpoints and
settings are writes and are never repeated (a repeated batch of events
would be recorded twice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from keepmem_client import _calls as calls
from keepmem_client import _models as m

if TYPE_CHECKING:
    import httpx

    from keepmem_client._base import Call

T = TypeVar("T")


class Sessions:
    """Sessions and collections for the sync client."""

    if TYPE_CHECKING:  # given by the client this is mixed into

        def _send(self, call: Call[Any]) -> httpx.Response: ...

        def _run(self, call: Call[T]) -> T: ...

    def session_events(self, events: Sequence[Mapping[str, Any]]) -> m.IntakeResult:
        """Record 1-100 hook events in the normalised shape
        (``docs/sessions-contract.md``); never retried."""
        return self._run(calls.session_events(events))

    def sessions(self, *, limit: int | None = None, cwd: str | None = None) -> list[m.Session]:
        """The project's sessions, most recently active first (``cwd``: one directory's)."""
        return self._run(calls.sessions(limit=limit, cwd=cwd))

    def session(self, session_id: str) -> m.Session:
        """One session (NotFoundError, code ``session_not_found``, if none)."""
        return self._run(calls.session(session_id))

    def session_timeline(
        self, session_id: str, *, kind: str | None = None, limit: int | None = None,
        cursor: str | None = None,
    ) -> m.SessionTimeline:  # fmt: skip
        """A page of a session's events, observations and checkpoints in
        order; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self._run(calls.session_timeline(session_id, kind=kind, limit=limit, cursor=cursor))

    def session_checkpoints(self, session_id: str) -> list[m.Checkpoint]:
        """A session's checkpoints, oldest first."""
        return self._run(calls.session_checkpoints(session_id))

    def session_patterns(
        self, *, kind: str | Sequence[str] | None = None, limit: int | None = None
    ) -> list[m.Pattern]:
        """What recurs across sessions (``error``, ``fix``, ``decision``,
        ``preference``), most widespread first."""
        return self._run(calls.session_patterns(kind=kind, limit=limit))

    def resume_context(
        self, *, cwd: str | None = None, session_id: str | None = None
    ) -> m.ResumeContext:
        """The "where you left off" block for a working directory (empty
        when injection is off for the project or the session)."""
        return self._run(calls.resume_context(cwd=cwd, session_id=session_id))

    def checkpoint(self, session_id: str, *, note: str | None = None) -> m.Session:
        """Ask for a checkpoint of the session now (the worker writes it)."""
        return self._run(calls.checkpoint(session_id, note=note))

    def set_session(
        self, session_id: str, *, capture: bool | None = None, inject: bool | None = None
    ) -> m.Session:
        """Turn capture or injection off (or on) for one session."""
        return self._run(calls.set_session(session_id, capture=capture, inject=inject))

    def session_settings(self) -> m.SessionSettings:
        """The project's session settings."""
        return self._run(calls.session_settings())

    def set_session_settings(
        self, *, capture: bool | None = None, inject: bool | None = None,
        excludes: Sequence[str] | None = None, resume_chars: int | None = None,
        llm_tokens_per_day: int | None = None,
    ) -> m.SessionSettings:  # fmt: skip
        """Change the project's session settings; those left out keep their values."""
        return self._run(
            calls.set_session_settings(
                capture=capture,
                inject=inject,
                excludes=excludes,
                resume_chars=resume_chars,
                llm_tokens_per_day=llm_tokens_per_day,
            )
        )

    def collections(self) -> list[m.Collection]:
        """The project's saved queries."""
        return self._run(calls.collections())

    def save_collection(
        self, name: str, *, query: str | None = None, tags: Mapping[str, str] | None = None,
        since: str | None = None, limit: int | None = None, description: str | None = None,
    ) -> m.Collection:  # fmt: skip
        """Save (or replace) a named query."""
        return self._run(
            calls.save_collection(
                name, query=query, tags=tags, since=since, limit=limit, description=description
            )
        )

    def collection(self, name: str) -> m.CollectionRun:
        """Run a saved query: its notes now."""
        return self._run(calls.collection(name))

    def export_collection(self, name: str, *, format: str | None = None) -> str:
        """A saved query's notes as ``markdown`` (the default), ``json`` or ``text``."""
        call = calls.export_collection(name, format=format)
        return call.parse(self._send(call).text)

    def delete_collection(self, name: str) -> None:
        """Forget a saved query (its notes stay)."""
        self._run(calls.delete_collection(name))


class AsyncSessions:
    """``Sessions`` for the async client: the same methods, awaited."""

    if TYPE_CHECKING:  # given by the client this is mixed into

        async def _send(self, call: Call[Any]) -> httpx.Response: ...

        async def _run(self, call: Call[T]) -> T: ...

    async def session_events(self, events: Sequence[Mapping[str, Any]]) -> m.IntakeResult:
        """Record 1-100 hook events; never retried."""
        return await self._run(calls.session_events(events))

    async def sessions(
        self, *, limit: int | None = None, cwd: str | None = None
    ) -> list[m.Session]:
        """The project's sessions, most recently active first."""
        return await self._run(calls.sessions(limit=limit, cwd=cwd))

    async def session(self, session_id: str) -> m.Session:
        """One session (NotFoundError, code ``session_not_found``, if none)."""
        return await self._run(calls.session(session_id))

    async def session_timeline(
        self, session_id: str, *, kind: str | None = None, limit: int | None = None,
        cursor: str | None = None,
    ) -> m.SessionTimeline:  # fmt: skip
        """A page of a session's events, observations and checkpoints."""
        return await self._run(
            calls.session_timeline(session_id, kind=kind, limit=limit, cursor=cursor)
        )

    async def session_checkpoints(self, session_id: str) -> list[m.Checkpoint]:
        """A session's checkpoints, oldest first."""
        return await self._run(calls.session_checkpoints(session_id))

    async def session_patterns(
        self, *, kind: str | Sequence[str] | None = None, limit: int | None = None
    ) -> list[m.Pattern]:
        """What recurs across sessions, most widespread first."""
        return await self._run(calls.session_patterns(kind=kind, limit=limit))

    async def resume_context(
        self, *, cwd: str | None = None, session_id: str | None = None
    ) -> m.ResumeContext:
        """The "where you left off" block for a working directory."""
        return await self._run(calls.resume_context(cwd=cwd, session_id=session_id))

    async def checkpoint(self, session_id: str, *, note: str | None = None) -> m.Session:
        """Ask for a checkpoint of the session now."""
        return await self._run(calls.checkpoint(session_id, note=note))

    async def set_session(
        self, session_id: str, *, capture: bool | None = None, inject: bool | None = None
    ) -> m.Session:
        """Turn capture or injection off (or on) for one session."""
        return await self._run(calls.set_session(session_id, capture=capture, inject=inject))

    async def session_settings(self) -> m.SessionSettings:
        """The project's session settings."""
        return await self._run(calls.session_settings())

    async def set_session_settings(
        self, *, capture: bool | None = None, inject: bool | None = None,
        excludes: Sequence[str] | None = None, resume_chars: int | None = None,
        llm_tokens_per_day: int | None = None,
    ) -> m.SessionSettings:  # fmt: skip
        """Change the project's session settings; those left out keep their values."""
        return await self._run(
            calls.set_session_settings(
                capture=capture,
                inject=inject,
                excludes=excludes,
                resume_chars=resume_chars,
                llm_tokens_per_day=llm_tokens_per_day,
            )
        )

    async def collections(self) -> list[m.Collection]:
        """The project's saved queries."""
        return await self._run(calls.collections())

    async def save_collection(
        self, name: str, *, query: str | None = None, tags: Mapping[str, str] | None = None,
        since: str | None = None, limit: int | None = None, description: str | None = None,
    ) -> m.Collection:  # fmt: skip
        """Save (or replace) a named query."""
        return await self._run(
            calls.save_collection(
                name, query=query, tags=tags, since=since, limit=limit, description=description
            )
        )

    async def collection(self, name: str) -> m.CollectionRun:
        """Run a saved query: its notes now."""
        return await self._run(calls.collection(name))

    async def export_collection(self, name: str, *, format: str | None = None) -> str:
        """A saved query's notes as ``markdown`` (the default), ``json`` or ``text``."""
        call = calls.export_collection(name, format=format)
        return call.parse((await self._send(call)).text)

    async def delete_collection(self, name: str) -> None:
        """Forget a saved query (its notes stay)."""
        await self._run(calls.delete_collection(name))
