"""LangChain on keepmem (extra ``[langchain]``): a retriever for chains and
the tools remember, recall and forget for agents.

    from keepmem_client import Keepmem
    from keepmem_client.langchain import KeepmemRetriever, keepmem_tools, render_context

    km = Keepmem()
    retriever = KeepmemRetriever(client=km, limit=5, filter={"topic": "travel"})
    chain = {"context": retriever | render_context, "question": RunnablePassthrough()} | prompt
    agent_tools = keepmem_tools(km)

A document is a note as find returns it: ``page_content`` its summary (a
short note's whole text; a long document's passages are found as parts
``ID@P{N}``), ``metadata`` its id, score, tags, times and, with ``cite``,
the citation. With ``token_budget`` the retriever asks keepmem for what fits
(compact find: one line a result, whole results only); with ``thread_id``
it reads the thread's context (what is known of its user, then the messages
that answer the query) under the budget. A tool call that keepmem refuses is
a ``ToolException`` carrying keepmem's reason, shown to the agent as a
failed tool call, never as a result.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
except ImportError as exc:  # the extra is not installed: say which one
    raise ImportError(
        "keepmem_client.langchain needs langchain-core: pip install 'keepmem-client[langchain]'"
    ) from exc
from pydantic import BaseModel, ConfigDict, Field, model_validator

from keepmem_client import _models as m
from keepmem_client._calls import FIND_FIELDS
from keepmem_client._client import AsyncKeepmem, Keepmem
from keepmem_client._errors import KeepmemError

# Given as fields of their own (or, per call, as keywords of invoke).
_OWN = ("query", "tags", "since", "until", "limit", "deep")
PASSED = frozenset(FIND_FIELDS) - set(_OWN)
PER_CALL = frozenset(FIND_FIELDS) - {"query"} | {"cite", "token_budget"}


# -- the retriever ----------------------------------------------------------------------


def _note_doc(note: m.ScoredNote, deep_from: str | None = None) -> Document:
    meta: dict[str, Any] = {
        "id": note.id, "score": note.score, "tags": note.tags,
        "created_at": note.created_at, "updated_at": note.updated_at,
    }  # fmt: skip
    if note.citation is not None:
        meta["citation"] = note.citation.model_dump(mode="json")
    if deep_from is not None:
        meta["deep_from"] = deep_from  # reached by following edges from this result
    return Document(id=note.id, page_content=note.summary, metadata=meta)


def _found(result: m.SearchResult) -> list[Document]:
    docs = [_note_doc(n) for n in result.notes]
    seen = {n.id for n in result.notes}
    for group in result.deep_groups:
        for n in group.items:
            if n.id not in seen:
                seen.add(n.id)
                docs.append(_note_doc(n, deep_from=group.id))
    return docs


def _compact(result: m.CompactResult) -> list[Document]:
    return [
        Document(
            id=line.id,
            page_content=line.summary,
            metadata={"id": line.id, "score": line.score, "date": line.date},
        )
        for line in result.results
    ]


def _thread(found: m.ThreadContext) -> list[Document]:
    docs = []
    for x in found.memories:
        meta = {"id": x.id, "type": "memory", "kind": x.kind, "subject": x.subject,
                "certainty": x.certainty, "valid_at": x.valid_at,
                "updated_at": x.updated_at}  # fmt: skip
        docs.append(Document(id=x.id, page_content=x.statement, metadata=meta))
    for y in found.messages:
        said = {"id": y.id, "type": "message", "score": y.score, "created_at": y.created_at}
        docs.append(Document(id=y.id, page_content=y.summary, metadata=said))
    return docs


def render_context(docs: Sequence[Document]) -> str:
    """Retrieved memory as one block for a prompt: a line per document
    (its text, then its id and date), in the order retrieved. Use it in a
    chain as ``retriever | render_context``."""
    lines = []
    for doc in docs:
        meta = doc.metadata
        when = str(
            meta.get("updated_at") or meta.get("date") or meta.get("created_at")
            or meta.get("valid_at") or ""
        )[:10]  # fmt: skip
        text = doc.page_content.strip().replace("\n", "\n  ")
        where = ", ".join(x for x in (str(meta.get("id") or doc.id or ""), when) if x)
        lines.append(f"- {text} [{where}]" if where else f"- {text}")
    return "\n".join(lines)


class KeepmemRetriever(BaseRetriever):
    """keepmem's find as a LangChain retriever (sync with ``Keepmem``, async
    with ``AsyncKeepmem``; give both to serve both without a thread).

    ``filter``: tags every result must carry (find's ``tags``; LangChain's
    ``tags`` field names a run's tags); ``search_kwargs``: any other find
    parameter (``scope``, ``stages``, ``bias``, ``as_of``, ``per_document``
    ...). ``invoke(query, tags=..., limit=...)`` overrides them for one call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Keepmem | None = None
    async_client: AsyncKeepmem | None = None
    limit: int = Field(default=10, ge=1, le=100)
    filter: dict[str, str | list[str]] | None = None
    since: str | None = Field(default=None, description="ISO-8601 duration (P7D) or date.")
    until: str | None = None
    deep: bool = Field(default=False, description="Also what edges from the results reach.")
    cite: bool = Field(default=False, description="A citation in each document's metadata.")
    token_budget: int | None = Field(
        default=None, ge=1, description="Only what fits (compact lines; a thread's context)."
    )
    thread_id: str | None = Field(
        default=None, description="Retrieve a thread's context instead of finding notes."
    )
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _sort_clients(cls, data: Any) -> Any:
        # KeepmemRetriever(client=AsyncKeepmem()) is the async client.
        if isinstance(data, dict) and isinstance(data.get("client"), AsyncKeepmem):
            data = {**data, "async_client": data["client"], "client": None}
        if isinstance(data, dict) and isinstance(data.get("tags"), dict):
            raise ValueError("keepmem tags to filter by go in filter=; tags= names a run's tags")
        return data

    @model_validator(mode="after")
    def _check(self) -> KeepmemRetriever:
        if self.client is None and self.async_client is None:
            raise ValueError("KeepmemRetriever needs a Keepmem or AsyncKeepmem client")
        unknown = set(self.search_kwargs) - PASSED
        if unknown:
            raise ValueError(f"not find parameters (or set as fields): {sorted(unknown)}")
        if self.token_budget is not None and self.cite:
            raise ValueError("cite and token_budget do not go together: compact lines carry none")
        if self.thread_id is not None and (
            self.filter or self.since or self.until or self.deep or self.cite or self.search_kwargs
        ):
            raise ValueError("a thread's context takes only a query and token_budget")
        return self

    def _plan(self, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Which call answers (``thread``, ``compact`` or ``find``) and its
        parameters: the fields, then one call's ``overrides``."""
        unknown = set(overrides) - (PER_CALL if self.thread_id is None else {"token_budget"})
        if unknown:
            raise TypeError(f"not find parameters here: {sorted(unknown)}")
        if self.thread_id is not None:
            return "thread", {"token_budget": overrides.get("token_budget", self.token_budget)}
        own = {"tags": self.filter, "since": self.since, "until": self.until, "limit": self.limit,
               "deep": self.deep or None, "cite": self.cite or None}  # fmt: skip
        params = {**own, **self.search_kwargs, "token_budget": self.token_budget, **overrides}
        params = {k: v for k, v in params.items() if v is not None}
        if "token_budget" not in params:
            return "find", params
        if params.pop("cite", False):
            raise ValueError("cite and token_budget do not go together: compact lines carry none")
        return "compact", params

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        km = self.client
        if km is None:
            raise RuntimeError("KeepmemRetriever needs a Keepmem client for sync use")
        how, params = self._plan(kwargs)
        if how == "thread":
            assert self.thread_id is not None
            return _thread(km.thread_context(self.thread_id, query=query, **params))
        if how == "compact":
            return _compact(km.find_compact(query, **params))
        return _found(km.find(query, **params))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        km = self.async_client
        if km is None:  # only a sync client: run it off the event loop
            return await run_in_executor(
                None, self._get_relevant_documents, query,
                run_manager=run_manager.get_sync(), **kwargs,
            )  # fmt: skip
        how, params = self._plan(kwargs)
        if how == "thread":
            assert self.thread_id is not None
            return _thread(await km.thread_context(self.thread_id, query=query, **params))
        if how == "compact":
            return _compact(await km.find_compact(query, **params))
        return _found(await km.find(query, **params))


# -- the tools --------------------------------------------------------------------------


class RememberInput(BaseModel):
    """What the remember tool takes."""

    content: str = Field(description="One fact, preference or decision, as one sentence.")
    id: str | None = Field(
        default=None,
        description="Store content as a note under this id instead (a new version if it exists).",
    )
    tags: dict[str, str] | None = Field(default=None, description="Tags to file it under.")
    subject: str | None = Field(default=None, description="Who or what it is about (Alice).")
    attribute: str | None = Field(default=None, description="What of them (lives_in).")
    value: str | None = Field(default=None, description="Its value (Munich).")


class RecallInput(BaseModel):
    """What the recall tool takes."""

    query: str = Field(description="What to look for, in words.")
    limit: int = Field(default=10, ge=1, le=100, description="At most this many results.")
    tags: dict[str, str] | None = Field(default=None, description="Tags every result carries.")
    since: str | None = Field(default=None, description="Changed since (P7D, or a date).")
    until: str | None = Field(default=None, description="Changed before (a duration or date).")
    token_budget: int | None = Field(
        default=None, ge=1, description="One line a result, only as many as fit this budget."
    )


class ForgetInput(BaseModel):
    """What the forget tool takes."""

    id: str = Field(description="The note or memory (mem/...) to delete, with its history.")


REMEMBER = (
    "Remember one fact, preference or decision (content: one sentence). Reconciled with "
    "what is believed: said again, it updates that memory instead of adding a copy; with "
    "subject, attribute and value a new value supersedes the old one. Returns the op (add, "
    "supersede, update, noop) and the memory. With an id: stores content as a note under "
    "that id instead and returns the note."
)
RECALL = (
    "Find what is remembered by meaning and words: ids, scores, text, tags. Filters: tags, "
    "since / until (P7D or a date); token_budget for one short line a result."
)
FORGET = "Delete a note or a memory (by its id) and its history."


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _hits(result: m.SearchResult) -> str:
    hits = [
        {"id": n.id, "score": round(n.score, 4), "text": n.summary, "tags": n.tags,
         "updated_at": n.updated_at}
        for n in result.notes
    ]  # fmt: skip
    return _json(hits)


def _memory_args(args: RememberInput) -> dict[str, Any]:
    if args.id is not None and (args.subject or args.attribute or args.value):
        raise ToolException("subject, attribute and value are for memories: leave out id")
    return {"subject": args.subject, "attribute": args.attribute, "value": args.value,
            "tags": args.tags}  # fmt: skip


def _refusing(fn: Callable[..., str]) -> Callable[..., str]:
    def run(**kwargs: Any) -> str:
        try:
            return fn(**kwargs)
        except KeepmemError as exc:  # the agent sees keepmem's reason, as a failed call
            raise ToolException(str(exc)) from exc

    return run


def _arefusing(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
    async def run(**kwargs: Any) -> str:
        try:
            return await fn(**kwargs)
        except KeepmemError as exc:
            raise ToolException(str(exc)) from exc

    return run


def _sync_tools(km: Keepmem) -> dict[str, Callable[..., str]]:
    def remember(**kwargs: Any) -> str:
        args = RememberInput(**kwargs)
        extra = _memory_args(args)
        if args.id is not None:
            return _json(km.put(args.content, id=args.id, tags=args.tags).model_dump())
        return _json(km.remember(args.content, **extra).model_dump())

    def recall(**kwargs: Any) -> str:
        args = RecallInput(**kwargs)
        params = args.model_dump(exclude={"query", "token_budget"}, exclude_none=True)
        if args.token_budget is not None:
            found = km.find_compact(args.query, token_budget=args.token_budget, **params)
            return _json(found.model_dump())
        return _hits(km.find(args.query, **params))

    def forget(**kwargs: Any) -> str:
        return _json(km.delete(ForgetInput(**kwargs).id).model_dump())

    return {"remember": remember, "recall": recall, "forget": forget}


def _async_tools(km: AsyncKeepmem) -> dict[str, Callable[..., Awaitable[str]]]:
    async def remember(**kwargs: Any) -> str:
        args = RememberInput(**kwargs)
        extra = _memory_args(args)
        if args.id is not None:
            return _json((await km.put(args.content, id=args.id, tags=args.tags)).model_dump())
        return _json((await km.remember(args.content, **extra)).model_dump())

    async def recall(**kwargs: Any) -> str:
        args = RecallInput(**kwargs)
        params = args.model_dump(exclude={"query", "token_budget"}, exclude_none=True)
        if args.token_budget is not None:
            found = await km.find_compact(args.query, token_budget=args.token_budget, **params)
            return _json(found.model_dump())
        return _hits(await km.find(args.query, **params))

    async def forget(**kwargs: Any) -> str:
        return _json((await km.delete(ForgetInput(**kwargs).id)).model_dump())

    return {"remember": remember, "recall": recall, "forget": forget}


_SCHEMAS: dict[str, tuple[type[BaseModel], str]] = {
    "remember": (RememberInput, REMEMBER),
    "recall": (RecallInput, RECALL),
    "forget": (ForgetInput, FORGET),
}


def keepmem_tools(
    client: Keepmem | AsyncKeepmem, async_client: AsyncKeepmem | None = None
) -> list[BaseTool]:
    """The tools remember, recall and forget over a keepmem client (a
    ``Keepmem`` for ``invoke``, an ``AsyncKeepmem`` for ``ainvoke``; give
    both to serve both). A call keepmem refuses is a ``ToolException`` with
    keepmem's message, handed to the agent as a failed call (``status``
    ``"error"``) rather than raised."""
    if isinstance(client, AsyncKeepmem):
        async_client = client
    sync = _sync_tools(client) if isinstance(client, Keepmem) else {}
    asynchronous = _async_tools(async_client) if async_client is not None else {}
    tools: list[BaseTool] = []
    for name, (schema, description) in _SCHEMAS.items():
        func, coroutine = sync.get(name), asynchronous.get(name)
        tools.append(
            StructuredTool(
                name=name,
                description=description,
                args_schema=schema,
                func=_refusing(func) if func is not None else None,
                coroutine=_arefusing(coroutine) if coroutine is not None else None,
                handle_tool_error=True,
            )
        )
    return tools
