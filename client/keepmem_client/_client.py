"""``Keepmem`` (sync) and ``AsyncKeepmem`` (async): the same methods, the
same calls (``_calls``), sent through an httpx client you may replace
(``transport=``) for tests or proxies."""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from keepmem_client import _calls as calls
from keepmem_client import _models as m
from keepmem_client._base import Call, Config, Consistency, backoff, raise_for, should_retry
from keepmem_client._errors import APIConnectionError, APIError, APITimeoutError
from keepmem_client._grounding import AsyncGrounding, Grounding
from keepmem_client._memories import AsyncMemories, Memories
from keepmem_client._sessions import AsyncSessions, Sessions

T = TypeVar("T")


def _send_error(exc: httpx.TransportError) -> APIConnectionError:
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"keepmem did not answer in time: {exc}")
    return APIConnectionError(f"cannot reach keepmem: {exc}")


def _upload(
    file: Any, *, filename: str | None, id: str | None, tags: calls.Tags | None
) -> Call[m.Note]:
    if isinstance(file, os.PathLike):
        return calls.upload_path(file, filename=filename, id=id, tags=tags)
    if filename is None:
        raise TypeError("upload of bytes or a file object needs a filename")
    return calls.upload(file, filename=filename, id=id, tags=tags)


class SyncBase:
    """The HTTP side of a sync client: configuration, lifecycle, retries."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        project: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = Config.resolve(base_url, api_key, project, timeout, max_retries, headers)
        self.consistency = Consistency()
        self._http = httpx.Client(
            base_url=self.config.base_url,
            headers=self.config.default_headers(),
            timeout=self.config.timeout,
            transport=transport,
            event_hooks=self.consistency.hooks(),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[Any]) -> httpx.Response:
        """The successful answer to ``call``, retried as far as ``call`` allows."""
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.json,
                    files=call.files, data=call.data,
                )  # fmt: skip
                raise_for(response)
                return response
            except (httpx.TransportError, APIError) as exc:
                attempt += 1
                if attempt > self.config.max_retries or not should_retry(exc, call):
                    if isinstance(exc, httpx.TransportError):
                        raise _send_error(exc) from exc
                    raise
                time.sleep(backoff(attempt, exc))

    def _run(self, call: Call[T]) -> T:
        response = self._send(call)
        return call.parse(response.json() if response.content else {})


class Keepmem(SyncBase, Sessions, Memories, Grounding):
    """A keepmem client.

        with Keepmem() as km:                      # KEEPMEM_URL, KEEPMEM_API_KEY
            km.put("OAuth2 uses PKCE", id="auth", tags={"topic": "auth"})
            for hit in km.find("PKCE").notes:
                print(hit.id, hit.score)

    Reads and other calls that are safe to repeat are retried on connection
    errors, 429 (after ``Retry-After``) and 5xx, ``max_retries`` times with
    exponential backoff and jitter; writes are never repeated.

    Coding-agent sessions and collections (``sessions``, ``session_timeline``,
    ``resume_context``, ``save_collection`` ...) come from ``Sessions``;
    threads of messages and the memories formed from them (``add_messages``,
    ``memories``, ``remember``, ``thread_context`` ...) from ``Memories``;
    citations, crawls and distillation (``cite``, ``verify_citation``,
    ``crawl``, ``distill`` ...) from ``Grounding``.
    """

    def put(self, content: str | None = None, **kwargs: Any) -> m.Note:
        """Create or update a note (``id``, ``uri``, ``summary``, ``tags``,
        ``created_at``, ``force``, ``analyze``). A URI alone is fetched by keepmem."""
        return self._run(calls.put(content, **kwargs))

    def put_many(self, notes: Sequence[Mapping[str, Any]]) -> m.BatchOut:
        """Up to 100 notes (each a dict of ``put``'s fields) in one request."""
        return self._run(calls.put_many(notes))

    def upload(
        self, file: Any, *, filename: str | None = None, id: str | None = None,
        tags: calls.Tags | None = None,
    ) -> m.Note:  # fmt: skip
        """A document (PDF, DOCX, XLSX, SRT, image, ...) as a note; ``file`` is
        bytes, a file object, or a path (``pathlib.Path``: read here, its name
        the ``filename`` unless given). Without ``id`` the note is named by
        the file's content (``%`` and 12 hex digits of its sha256)."""
        return self._run(_upload(file, filename=filename, id=id, tags=tags))

    def get(self, note_id: str) -> m.Note:
        """A note, ``ID@V{N}`` version or ``ID@P{N}`` part (NotFoundError if none)."""
        return self._run(calls.get(note_id))

    def find(
        self, query: str | None = None, *, cite: bool = False, per_document: int | None = None,
        **params: Any,
    ) -> m.SearchResult:  # fmt: skip
        """Hybrid find; every search parameter of ``POST /v1/search`` is a
        keyword. ``cite``: each result with a ``citation`` (not stored; the
        project must keep text); ``per_document``: at most this many results
        of one document (a note and its passages)."""
        return self._run(calls.find(query=query, cite=cite, per_document=per_document, **params))

    def find_compact(self, query: str | None = None, **params: Any) -> m.CompactResult:
        """The same find, one line per result, within ``token_budget``."""
        return self._run(calls.find_compact(query=query, **params))

    def timeline(self, note_id: str, **params: Any) -> dict[str, Any]:
        return self._run(calls.timeline(note_id, **params))

    def detail(self, note_id: str, **params: Any) -> dict[str, Any]:
        return self._run(calls.detail(note_id, **params))

    def list(self, *, page_size: int = 100, **params: Any) -> Iterator[m.Note]:
        """Every matching note, page by page as you iterate."""
        cursor: str | None = None
        while True:
            page = self._run(calls.list_page(limit=page_size, cursor=cursor, **params))
            yield from page.notes
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def tag(self, note_id: str, set: Mapping[str, Any] | None = None, **kwargs: Any) -> m.Note:
        return self._run(calls.tag(note_id, set, **kwargs))

    def delete(self, note_id: str, *, delete_versions: bool = True) -> m.Deleted:
        return self._run(calls.delete(note_id, delete_versions=delete_versions))

    def move(self, name: str, **kwargs: Any) -> m.Note:
        return self._run(calls.move(name, **kwargs))

    def versions(self, note_id: str, **kwargs: Any) -> m.VersionList:
        return self._run(calls.versions(note_id, **kwargs))

    def parts(self, note_id: str) -> builtins.list[m.Note]:
        return self._run(calls.parts(note_id))

    def now(self, content: str | None = None, **kwargs: Any) -> m.Note:
        """The working context note: read it, or with ``content`` replace it."""
        if content is None:
            return self.get("now")
        return self.put(content, id="now", **kwargs)

    def jobs(self, **params: Any) -> m.JobPage:
        return self._run(calls.jobs(**params))

    def entities(self, **params: Any) -> builtins.list[dict[str, Any]]:
        return list(self._run(calls.entities(**params)))

    def walk(self, **params: Any) -> dict[str, Any]:
        return self._run(calls.walk(**params))

    def graph_export(self, format: str = "graphml", table: str | None = None) -> str:
        """The graph as GraphML, or with ``format="csv"`` one ``table``
        (entities, mentions, relations, edges, topics) as CSV."""
        call = calls.graph_export(format=format, table=table)
        return call.parse(self._send(call).text)

    def graph_stats(self) -> dict[str, Any]:
        """Counts of entities, mentions, relations, note edges and topics,
        the most-mentioned entities and the entity graph's components."""
        return self._run(calls.graph_stats())

    def export(self, *, include_system: bool = False) -> Iterator[dict[str, Any]]:
        """The project in keep's export format, streamed: the header, then one
        document at a time."""
        params = {"stream": "ndjson", "include_system": "true" if include_system else "false"}
        try:
            with self._http.stream("GET", "/v1/export", params=params) as response:
                if not response.is_success:
                    response.read()
                    raise_for(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as exc:
            raise _send_error(exc) from exc

    def import_(
        self, documents: Sequence[Mapping[str, Any]], *, mode: str = "merge"
    ) -> m.ImportResult:
        return self._run(calls.import_(documents, mode=mode))

    def health(self) -> dict[str, Any]:
        return self._run(calls.health())

    def flow(
        self, state: str, params: Mapping[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """Run a keep flow state (``put``, ``query-resolve``, ``prompt`` ...)."""
        return self._run(calls.flow(state, params, **extra))

    def settings(self) -> m.ProjectSettings:
        """The project's settings (sanitize, decay_half_life_days, auto_tag,
        sessions, memories), the server's defaults filled in."""
        return self._run(calls.settings())

    def update_settings(self, **changes: Any) -> m.ProjectSettings:
        """Change the settings named (an admin key); None puts a setting back
        to the server's default. ``sessions`` and ``memories`` take dicts of
        the fields to change. Returns every setting."""
        return self._run(calls.update_settings(changes))


class AsyncKeepmem(AsyncSessions, AsyncMemories, AsyncGrounding):
    """``Keepmem`` for asyncio: the same methods, awaited (``list`` and
    ``export`` are async iterators)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        project: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = Config.resolve(base_url, api_key, project, timeout, max_retries, headers)
        self.consistency = Consistency()
        self._http = httpx.AsyncClient(
            base_url=self.config.base_url,
            headers=self.config.default_headers(),
            timeout=self.config.timeout,
            transport=transport,
            event_hooks=self.consistency.async_hooks(),
        )

    async def __aenter__(self) -> AsyncKeepmem:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[Any]) -> httpx.Response:
        """The successful answer to ``call``, retried as far as ``call`` allows."""
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json,
                    files=call.files, data=call.data,
                )  # fmt: skip
                raise_for(response)
                return response
            except (httpx.TransportError, APIError) as exc:
                attempt += 1
                if attempt > self.config.max_retries or not should_retry(exc, call):
                    if isinstance(exc, httpx.TransportError):
                        raise _send_error(exc) from exc
                    raise
                await asyncio.sleep(backoff(attempt, exc))

    async def _run(self, call: Call[T]) -> T:
        response = await self._send(call)
        return call.parse(response.json() if response.content else {})

    async def put(self, content: str | None = None, **kwargs: Any) -> m.Note:
        return await self._run(calls.put(content, **kwargs))

    async def put_many(self, notes: Sequence[Mapping[str, Any]]) -> m.BatchOut:
        return await self._run(calls.put_many(notes))

    async def upload(
        self, file: Any, *, filename: str | None = None, id: str | None = None,
        tags: calls.Tags | None = None,
    ) -> m.Note:  # fmt: skip
        if isinstance(file, os.PathLike):  # read off the event loop
            where = Path(file)
            file, filename = await asyncio.to_thread(where.read_bytes), filename or where.name
        return await self._run(_upload(file, filename=filename, id=id, tags=tags))

    async def get(self, note_id: str) -> m.Note:
        return await self._run(calls.get(note_id))

    async def find(
        self, query: str | None = None, *, cite: bool = False, per_document: int | None = None,
        **params: Any,
    ) -> m.SearchResult:  # fmt: skip
        return await self._run(
            calls.find(query=query, cite=cite, per_document=per_document, **params)
        )

    async def find_compact(self, query: str | None = None, **params: Any) -> m.CompactResult:
        return await self._run(calls.find_compact(query=query, **params))

    async def timeline(self, note_id: str, **params: Any) -> dict[str, Any]:
        return await self._run(calls.timeline(note_id, **params))

    async def detail(self, note_id: str, **params: Any) -> dict[str, Any]:
        return await self._run(calls.detail(note_id, **params))

    async def list(self, *, page_size: int = 100, **params: Any) -> AsyncIterator[m.Note]:
        cursor: str | None = None
        while True:
            page = await self._run(calls.list_page(limit=page_size, cursor=cursor, **params))
            for note in page.notes:
                yield note
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def tag(
        self, note_id: str, set: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> m.Note:
        return await self._run(calls.tag(note_id, set, **kwargs))

    async def delete(self, note_id: str, *, delete_versions: bool = True) -> m.Deleted:
        return await self._run(calls.delete(note_id, delete_versions=delete_versions))

    async def move(self, name: str, **kwargs: Any) -> m.Note:
        return await self._run(calls.move(name, **kwargs))

    async def versions(self, note_id: str, **kwargs: Any) -> m.VersionList:
        return await self._run(calls.versions(note_id, **kwargs))

    async def parts(self, note_id: str) -> builtins.list[m.Note]:
        return await self._run(calls.parts(note_id))

    async def now(self, content: str | None = None, **kwargs: Any) -> m.Note:
        if content is None:
            return await self.get("now")
        return await self.put(content, id="now", **kwargs)

    async def jobs(self, **params: Any) -> m.JobPage:
        return await self._run(calls.jobs(**params))

    async def entities(self, **params: Any) -> builtins.list[dict[str, Any]]:
        return list(await self._run(calls.entities(**params)))

    async def walk(self, **params: Any) -> dict[str, Any]:
        return await self._run(calls.walk(**params))

    async def graph_export(self, format: str = "graphml", table: str | None = None) -> str:
        call = calls.graph_export(format=format, table=table)
        return call.parse((await self._send(call)).text)

    async def graph_stats(self) -> dict[str, Any]:
        return await self._run(calls.graph_stats())

    async def export(self, *, include_system: bool = False) -> AsyncIterator[dict[str, Any]]:
        params = {"stream": "ndjson", "include_system": "true" if include_system else "false"}
        try:
            async with self._http.stream("GET", "/v1/export", params=params) as response:
                if not response.is_success:
                    await response.aread()
                    raise_for(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as exc:
            raise _send_error(exc) from exc

    async def import_(
        self, documents: Sequence[Mapping[str, Any]], *, mode: str = "merge"
    ) -> m.ImportResult:
        return await self._run(calls.import_(documents, mode=mode))

    async def health(self) -> dict[str, Any]:
        return await self._run(calls.health())

    async def flow(
        self, state: str, params: Mapping[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        return await self._run(calls.flow(state, params, **extra))

    async def settings(self) -> m.ProjectSettings:
        return await self._run(calls.settings())

    async def update_settings(self, **changes: Any) -> m.ProjectSettings:
        return await self._run(calls.update_settings(changes))
