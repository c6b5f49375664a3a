"""``keepmem-mcp``: an MCP server on stdio that gives an agent its keepmem
memory (extra ``[mcp]``, built on the official ``mcp`` SDK).

    KEEPMEM_URL=... KEEPMEM_API_KEY=... keepmem-mcp      # or --url / --api-key / --project

Tools: remember (a memory, reconciled: said again it updates instead of
adding a copy; with an ``id``, a note), recall, get, context, timeline, tag,
forget, versions; find (every parameter of keepmem's find: deep, similar_to,
since / until, tags, citations ...) and the graph: entities, walk, stats;
for conversations and what is believed: add_messages, memories, memory,
thread_context; for coding-agent sessions: sessions, session_timeline,
session_patterns, resume_context; for documents and what they say: ingest
(a URI, or a file on this machine), cite, verify_citation, distill, crawl.
Every tool answers with ``structuredContent`` and its ``outputSchema``
(``_mcp_outputs``) as well as text.
Prompts: the project's own prompt notes (``.prompt/agent/*`` with an
``mcp_prompt`` tag naming their arguments), listed afresh on every request
(a prompt a project adds or edits is served at once, and each caller sees
its own project's) and rendered by keepmem's ``prompt`` flow. Resources:
``keepmem://now`` and ``keepmem://{id}``. A failed call is an MCP tool error
carrying keepmem's message, never a result that looks like success; a failed
resource read or prompt is a protocol error with keepmem's message (a missing
note: the SDK's resource-not-found error).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar, cast

from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field

from keepmem_client import _mcp_grounding, _mcp_recall
from keepmem_client import _mcp_outputs as out
from keepmem_client import _models as m
from keepmem_client._client import AsyncKeepmem
from keepmem_client._errors import AuthenticationError, KeepmemError, NotFoundError

INSTRUCTIONS = (
    "keepmem is your long-term memory. remember a fact, preference or decision as one "
    "sentence (said again, it updates the memory instead of adding a copy; a new value "
    "supersedes the old; with an id it stores a note), or hand a conversation to "
    "add_messages and keepmem forms the memories. Before answering in a thread, "
    "thread_context; memories for what is believed (as_of: then), memory for one "
    "memory's versions and sources. recall by meaning (find for every filter, deep and "
    "similar_to), get or context for one note, tag to file, forget what is wrong. Notes "
    "keep their history (versions). entities, walk and stats for the graph of who and what "
    "the notes mention. Coding sessions: "
    "resume_context for where you left off in a directory, sessions and "
    "session_timeline for what happened, session_patterns for recurring errors and fixes. "
    "Documents: ingest a URI or file, find with cite to quote, verify_citation before "
    "relying on one, distill a memory from cited passages, crawl a docs site."
)


# A model rather than a plain dict, so the tool's input schema spells the
# fields out for the agent (and a misspelt one is refused before a call).
class ChatMessage(BaseModel):
    """One message of a conversation."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"]
    content: str
    name: str | None = Field(
        default=None, description="Who spoke (default: user_id for user messages)."
    )
    time: str | None = Field(default=None, description="ISO-8601 (default: when it arrives).")


T = TypeVar("T")


def _text(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def build(client: AsyncKeepmem | Callable[[], AsyncKeepmem], *, files: bool = False) -> Any:
    """The MCP server over a keepmem client (or a function giving the client
    of the request being served: then every request lists and renders the
    prompts of its own caller's project). ``files``: ingest reads a path on
    this machine (the stdio proxy, beside the agent); otherwise it takes the
    file's content as base64."""
    km = cast(AsyncKeepmem, _Lazy(client))  # it stands for the client of the moment
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

    class Server(MCPServer):
        """Prompts are the project's notes, so they are asked for when
        listed or rendered rather than registered once."""

        async def list_prompts(self) -> list[Any]:
            return await _list_prompts(km)

        async def get_prompt(
            self, name: str, arguments: dict[str, Any] | None = None, context: Any = None
        ) -> Any:
            return await _get_prompt(km, name, arguments or {})

    server = Server("keepmem", instructions=INSTRUCTIONS, log_level="WARNING")

    async def call(coro: Awaitable[T]) -> T:
        try:
            return await coro
        except KeepmemError as exc:  # a tool error the agent sees, with keepmem's reason
            raise ToolError(str(exc)) from exc

    @server.tool(
        description="Remember one fact, preference or decision (content: one sentence). "
        "Reconciled with what is believed: said again, it updates that memory instead of "
        "adding a copy; with subject, attribute and value (e.g. Alice, lives_in, Munich) a "
        "new value supersedes the old one. Returns the op (add, supersede, update, noop) "
        "and the memory. With an id: stores content as a note under that id instead (a new "
        "version if it exists) and returns the note."
    )
    async def remember(
        content: str,
        id: str | None = None,
        tags: dict[str, str] | None = None,
        subject: str | None = None,
        attribute: str | None = None,
        value: str | None = None,
    ) -> out.Stored:
        if id is not None:
            if subject or attribute or value:
                raise ToolError("subject, attribute and value are for memories: leave out id")
            return out.Stored(await call(km.put(content, id=id, tags=tags)))
        made = km.remember(content, subject=subject, attribute=attribute, value=value, tags=tags)
        return out.Stored(await call(made))

    @server.tool(
        description="Find notes by meaning and words, one line each; filters: tags, since "
        "(P7D). find has every filter, deep, similar_to and citations."
    )
    async def recall(
        query: str, limit: int = 10, tags: dict[str, str] | None = None, since: str | None = None
    ) -> m.CompactResult:
        return await call(km.find_compact(query, limit=limit, tags=tags, since=since))

    @server.tool(description="One note by id (ID@V{N}: an earlier version; ID@P{N}: a part).")
    async def get(id: str) -> m.Note:
        return await call(km.get(id))

    @server.tool(description="A note in full with its parts and history, within token_budget.")
    async def context(id: str, token_budget: int | None = None) -> out.Detail:
        return out.Detail.model_validate(await call(km.detail(id, token_budget=token_budget)))

    @server.tool(description="What came before and after a note in time.")
    async def timeline(id: str, before: int = 5, after: int = 5) -> out.Timeline:
        found = await call(km.timeline(id, before=before, after=after))
        return out.Timeline.model_validate(found)

    @server.tool(description='Add tags to a note ({"key": "value"}; "" removes a key).')
    async def tag(id: str, tags: dict[str, str]) -> m.Note:
        return await call(km.tag(id, tags))

    @server.tool(description="Delete a note and its history.")
    async def forget(id: str) -> m.Deleted:
        return await call(km.delete(id))

    @server.tool(description="A note's earlier versions, newest first.")
    async def versions(id: str, limit: int = 10) -> m.VersionList:
        return await call(km.versions(id, limit=limit))

    @server.tool(
        description="Add messages of a conversation to a thread (made on first use); keepmem "
        "stores them and, unless infer is false, forms memories from them (facts, "
        "preferences, decisions, tasks, events), reconciled with what is already believed."
    )
    async def add_messages(
        thread_id: str,
        messages: list[ChatMessage],
        user_id: str | None = None,
        infer: bool = True,
    ) -> m.MessagesAdded:
        sent = [message.model_dump(exclude_none=True) for message in messages]
        return await call(km.add_messages(thread_id, sent, user_id=user_id, infer=infer))

    @server.tool(
        description="What is believed, newest first: a user's or a subject's memories "
        "(all when neither is named); as_of (ISO-8601) for what was believed then, "
        "include_superseded for every memory, current or replaced."
    )
    async def memories(
        user_id: str | None = None,
        subject: str | None = None,
        as_of: str | None = None,
        include_superseded: bool = False,
        limit: int = 50,
    ) -> Annotated[CallToolResult, out.Memories]:
        held = km.memories(
            user_id=user_id,
            subject=subject,
            as_of=as_of,
            include_superseded=include_superseded,
            limit=limit,
        )
        return out.listed("memories", await call(held))

    @server.tool(
        description="One memory by id (mem/...): its earlier wordings (versions), the "
        "messages it came from (source_messages) and every belief of its slot (history)."
    )
    async def memory(id: str) -> m.MemoryDetail:
        return await call(km.memory(id))

    @server.tool(
        description="What to know before answering in a thread, as one block: the current "
        "memories of its user (the most relevant to query first), then the past messages "
        "that answer it best, within token_budget (default 1500)."
    )
    async def thread_context(
        thread_id: str, query: str | None = None, token_budget: int | None = None
    ) -> Annotated[CallToolResult, m.ThreadContext]:
        found = await call(km.thread_context(thread_id, query=query, token_budget=token_budget))
        # An empty block is an answer, not a failure: say so.
        return out.prose(found.context or "(nothing known yet for this thread)", found)

    @server.tool(description="Recent coding sessions of the project (cwd: one directory's).")
    async def sessions(
        cwd: str | None = None, limit: int = 20
    ) -> Annotated[CallToolResult, out.Sessions]:
        return out.listed("sessions", await call(km.sessions(cwd=cwd, limit=limit)))

    @server.tool(
        description="A session's events, observations and checkpoints in order "
        "(kind: one kind, e.g. tool_failure or checkpoint)."
    )
    async def session_timeline(
        session_id: str, kind: str | None = None, limit: int = 50
    ) -> m.SessionTimeline:
        return await call(km.session_timeline(session_id, kind=kind, limit=limit))

    @server.tool(
        description="What recurs across sessions: errors, fixes, decisions, preferences "
        "(kind: one of them)."
    )
    async def session_patterns(
        kind: str | None = None, limit: int = 20
    ) -> Annotated[CallToolResult, out.Patterns]:
        return out.listed("patterns", await call(km.session_patterns(kind=kind, limit=limit)))

    @server.tool(
        description="Where you left off in a directory: the last checkpoint, open tasks, "
        "recurring patterns."
    )
    async def resume_context(
        cwd: str = "", session_id: str | None = None
    ) -> Annotated[CallToolResult, m.ResumeContext]:
        found = await call(km.resume_context(cwd=cwd, session_id=session_id))
        # An empty block is an answer, not a failure: say which one it is.
        if found.context:
            return out.prose(found.context, found)
        if not found.inject:
            return out.prose(
                "(no resume context: injection is off for this project or session)", found
            )
        return out.prose("(no resume context yet for this directory)", found)

    _mcp_recall.add_tools(server, km, call)
    _mcp_grounding.add_tools(server, km, call, ToolError, files=files)

    async def read(coro: Any) -> str:
        # A resource read that fails is a protocol error: "not found" in the
        # SDK's convention for a missing note, keepmem's reason otherwise
        # (anything else would be an internal error, logged with its stack).
        try:
            return _text(await coro)
        except NotFoundError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except KeepmemError as exc:
            raise ResourceError(str(exc)) from exc

    @server.resource("keepmem://now", name="now", mime_type="application/json")
    async def now() -> str:
        return await read(_dump(km.now()))

    @server.resource("keepmem://{id}", name="note", mime_type="application/json")
    async def note(id: str) -> str:
        return await read(_dump(km.get(id)))

    return server


class _Lazy:
    """The client to use, now: a fixed one (stdio) or the current request's (HTTP)."""

    def __init__(self, client: AsyncKeepmem | Callable[[], AsyncKeepmem]) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        client = self._client if isinstance(self._client, AsyncKeepmem) else self._client()
        return getattr(client, name)


async def _dump(coro: Any) -> Any:
    value = await coro
    return value.model_dump() if hasattr(value, "model_dump") else value


# What the arguments keep's prompts declare mean (a project's own may name others).
ARGUMENTS = {
    "text": "The question or text the prompt is about.",
    "id": "The note in view (default: now).",
    "since": "Only what changed since then (ISO-8601 or a duration such as P7D).",
    "until": "Only what changed before then (ISO-8601 or a duration).",
    "token_budget": "At most this many tokens of context (a whole number).",
}
_RESERVED = ("name", "list")  # the prompt flow's own parameters


def _refused(code: int, message: str) -> Exception:
    from mcp.shared.exceptions import MCPError

    return MCPError(code, message)


async def _prompt_flow(km: Any, params: dict[str, Any]) -> dict[str, Any]:
    from mcp.types import INTERNAL_ERROR

    try:
        result: dict[str, Any] = await km.flow("prompt", params)
    except KeepmemError as exc:  # keepmem's reason, as a protocol error
        raise _refused(INTERNAL_ERROR, str(exc)) from exc
    return result


async def _list_prompts(km: Any) -> list[Any]:
    """The caller's project's prompts that declare MCP arguments (the
    ``mcp_prompt`` tag), as keep's own MCP server lists them."""
    from mcp.types import Prompt, PromptArgument

    listed = await _prompt_flow(km, {"list": True})
    out = []
    for entry in (listed.get("data") or {}).get("prompts") or []:
        args = entry.get("mcp_arguments") if isinstance(entry, dict) else None
        if not args or not isinstance(args, list):
            continue
        arguments = [
            PromptArgument(name=arg, description=ARGUMENTS.get(arg), required=False)
            for arg in args
            if isinstance(arg, str) and arg
        ]
        name = str(entry.get("name") or "")
        out.append(
            Prompt(name=name, description=str(entry.get("summary") or name), arguments=arguments)
        )
    return out


async def _get_prompt(km: Any, name: str, arguments: dict[str, Any]) -> Any:
    """One prompt of the caller's project, rendered by keepmem's ``prompt``
    flow with the arguments given (empty ones left out)."""
    from mcp.types import INVALID_PARAMS, GetPromptResult, PromptMessage, TextContent

    params: dict[str, Any] = {"name": name}
    for arg, value in arguments.items():
        if arg in _RESERVED or value is None or value == "":
            continue
        if arg == "token_budget":
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise _refused(INVALID_PARAMS, "token_budget must be a whole number") from None
        params[arg] = value
    result = await _prompt_flow(km, params)
    data = result.get("data") or {}
    text = data.get("text")
    if result.get("status") == "error" or not isinstance(text, str):
        raise _refused(INVALID_PARAMS, str(data.get("error") or f"prompt failed: {name}"))
    message = PromptMessage(role="user", content=TextContent(type="text", text=text))
    return GetPromptResult(messages=[message])


async def serve(km: AsyncKeepmem) -> None:
    try:  # the key is checked before serving: an agent host shows why it failed
        await km.flow("prompt", {"list": True})
    except AuthenticationError as exc:
        raise SystemExit(f"keepmem-mcp: the API key was refused: {exc.message}") from exc
    server = build(km, files=True)
    await server.run_stdio_async()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="keepmem-mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="keepmem URL (default KEEPMEM_URL)")
    parser.add_argument("--api-key", help="API key (default KEEPMEM_API_KEY)")
    parser.add_argument("--project", help="project (default KEEPMEM_PROJECT)")
    args = parser.parse_args(argv)

    async def run() -> None:
        async with AsyncKeepmem(args.url, args.api_key, project=args.project) as km:
            await serve(km)

    asyncio.run(run())


if __name__ == "__main__":
    main()
