"""MCP served by keepmem at /mcp (streamable HTTP, stateless), through a real
MCP client session, authenticated with the tenant's API key."""

from __future__ import annotations

import json

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _failed(result) -> bool:
    flag = getattr(result, "is_error", None)
    return bool(flag if flag is not None else getattr(result, "isError", False))


async def test_remote_agent_over_streamable_http(live_url, tenant) -> None:
    headers = {"Authorization": f"Bearer {tenant.key}", "X-Project": "remote"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"remember", "recall", "get", "forget"} <= names
        stored = await session.call_tool(
            "remember", {"content": "Low tide at six", "id": "tide", "tags": {"topic": "sea"}}
        )
        assert not _failed(stored) and json.loads(_text(stored))["id"] == "tide"
        recalled = json.loads(_text(await session.call_tool("recall", {"query": "tide"})))
        assert recalled["results"][0]["id"] == "tide"
        got = json.loads(_text(await session.call_tool("get", {"id": "tide"})))
        assert got["tags"]["topic"] == "sea"
        missing = await session.call_tool("get", {"id": "nothing-here"})
        assert _failed(missing) and "note_not_found" in _text(missing)
        prompts = {p.name for p in (await session.list_prompts()).prompts}
        assert "reflect" in prompts
        rendered = await session.get_prompt("query", {"text": "tide"})
        assert "tide" in "".join(getattr(m.content, "text", "") for m in rendered.messages)
        note = await session.read_resource("keepmem://tide")
        assert json.loads(note.contents[0].text)["summary"] == "Low tide at six"
    # the note is in the tenant's project, as any client sees it
    r = httpx.get(f"{live_url}/v1/notes/tide", headers=headers)
    assert r.status_code == 200


async def test_mcp_refuses_a_bad_key_clearly(live_url) -> None:
    r = httpx.post(
        f"{live_url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        headers={"Authorization": "Bearer km_badkey0_" + "x" * 30, "Accept": "application/json"},
    )
    assert r.status_code == 401
    assert r.json()["code"] == "unauthorized"
    # RFC 9728: the challenge says where an MCP client learns how to get a token
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer resource_metadata=")
    assert challenge.endswith('/.well-known/oauth-protected-resource/mcp"')
    r = httpx.post(f"{live_url}/mcp", json={})
    assert r.status_code == 401 and "missing credentials" in r.json()["error"]
