"""keepmem-mcp through a real MCP client session over stdio (the official
``mcp`` SDK on both ends), against a live keepmem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

PROXY = Path(sys.executable).parent / "keepmem-mcp"


def _params(url: str, key: str) -> StdioServerParameters:
    env = {"KEEPMEM_URL": url, "KEEPMEM_API_KEY": key, "KEEPMEM_PROJECT": "agent",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    return StdioServerParameters(command=str(PROXY), args=[], env=env)


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _failed(result) -> bool:
    flag = getattr(result, "is_error", None)
    return bool(flag if flag is not None else getattr(result, "isError", False))


async def test_an_agent_remembers_recalls_and_reads(live_url, tenant) -> None:
    async with (
        stdio_client(_params(live_url, tenant.key)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"remember", "recall", "get", "context", "timeline", "tag",
                              "forget", "versions", "sessions", "session_timeline",
                              "session_patterns", "resume_context"}  # fmt: skip
        assert tools["remember"].description and "content" in json.dumps(
            tools["remember"].inputSchema
            if hasattr(tools["remember"], "inputSchema")
            else tools["remember"].input_schema
        )

        stored = await session.call_tool(
            "remember",
            {"content": "The ferry leaves at seven", "id": "ferry", "tags": {"topic": "travel"}},
        )
        assert not _failed(stored) and json.loads(_text(stored))["id"] == "ferry"
        await session.call_tool(
            "remember", {"content": "The ferry now leaves at eight", "id": "ferry"}
        )
        recalled = await session.call_tool("recall", {"query": "ferry"})
        assert json.loads(_text(recalled))["results"][0]["id"] == "ferry"
        got = json.loads(_text(await session.call_tool("get", {"id": "ferry"})))
        assert got["summary"] == "The ferry now leaves at eight"
        history = json.loads(_text(await session.call_tool("versions", {"id": "ferry"})))
        assert history["versions"][0]["summary"] == "The ferry leaves at seven"
        tagged = json.loads(
            _text(await session.call_tool("tag", {"id": "ferry", "tags": {"status": "open"}}))
        )
        assert tagged["tags"]["status"] == "open"
        detail = json.loads(_text(await session.call_tool("context", {"id": "ferry"})))
        assert detail["note"]["id"] == "ferry"

        missing = await session.call_tool("get", {"id": "no-such-note"})
        assert _failed(missing) and "note_not_found" in _text(missing)

        prompts = {p.name for p in (await session.list_prompts()).prompts}
        assert {"reflect", "query"} <= prompts
        rendered = await session.get_prompt("query", {"text": "ferry"})
        text = "".join(getattr(m.content, "text", "") for m in rendered.messages)
        assert "ferry" in text and "{find}" not in text

        note = await session.read_resource("keepmem://ferry")
        assert json.loads(note.contents[0].text)["id"] == "ferry"
        now = await session.read_resource("keepmem://now")
        assert json.loads(now.contents[0].text)["id"] == "now"

        gone = await session.call_tool("forget", {"id": "ferry"})
        assert not _failed(gone)
        assert _failed(await session.call_tool("get", {"id": "ferry"}))


def test_a_bad_key_is_a_clear_error(live_url) -> None:
    """The proxy checks its key before serving: a refused key ends it with a
    message an agent host shows, instead of tools that fail later."""
    params = _params(live_url, "km_badkey0_" + "x" * 30)
    out = subprocess.run(
        [params.command], env=params.env, input="", capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "keepmem-mcp: the API key was refused: invalid API key" in out.stderr
