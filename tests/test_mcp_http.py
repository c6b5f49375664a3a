"""MCP served by keepmem at /mcp (streamable HTTP, stateless), through a real
MCP client session, authenticated with the tenant's API key."""

from __future__ import annotations

import json

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.test_sessions import digest


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


MINE = "# Mine\n\nThe project's own prompt.\n\n## Prompt\n\nTell me about {text}."


async def _session_prompts(live_url: str, headers: dict[str, str]) -> tuple[set[str], str]:
    """The prompts /mcp lists for these credentials, and "mine" rendered
    (or the error rendering it gave)."""
    from mcp.shared.exceptions import MCPError

    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        listed = {p.name: p for p in (await session.list_prompts()).prompts}
        if "mine" in listed:
            assert [a.name for a in listed["mine"].arguments or []] == ["text"]
        try:
            rendered = await session.get_prompt("mine", {"text": "tides"})
        except MCPError as exc:
            return set(listed), f"error: {exc.message}"
        return set(listed), "".join(getattr(m.content, "text", "") for m in rendered.messages)


async def test_a_projects_own_prompt_is_listed_for_its_callers_only(
    live_url, tenant, other_tenant
) -> None:
    """/mcp lists the caller's project's prompts that carry an mcp_prompt
    tag, per request: one a project adds is listed for its key at once,
    not for another project's or another tenant's, and renders."""
    mine = {**tenant.headers, "X-Project": "own-prompts"}
    r = httpx.post(
        f"{live_url}/v1/notes",
        json={"id": ".prompt/agent/mine", "content": MINE, "tags": {"mcp_prompt": "text"}},
        headers=mine,
    )
    assert r.status_code == 200, r.text
    listed, text = await _session_prompts(live_url, mine)
    assert {"mine", "reflect", "query"} <= listed
    assert "Tell me about tides." in text
    for headers in ({**tenant.headers, "X-Project": "elsewhere"}, other_tenant.headers):
        listed, text = await _session_prompts(live_url, headers)
        assert "mine" not in listed and "reflect" in listed
        assert text.startswith("error:") and "mine" in text
    # a prompt without the tag is the flow's, not MCP's
    r = httpx.patch(
        f"{live_url}/v1/notes/.prompt%2Fagent%2Fmine/tags",
        json={"remove": ["mcp_prompt"]},
        headers=mine,
    )
    assert r.status_code == 200 and "mcp_prompt" not in r.json()["tags"], r.text
    listed, _ = await _session_prompts(live_url, mine)
    assert "mine" not in listed and "reflect" in listed


async def test_memories_over_mcp(live_url, tenant, client, make_pipeline) -> None:
    """remember without an id is a memory, reconciled (twice the same
    sentence leaves one memory); a conversation handed to add_messages
    becomes memories once the worker's extraction ran, read back current,
    as of a time, with their sources and history, and in the thread's
    context block; failures are tool errors with keepmem's reason."""
    headers = {"Authorization": f"Bearer {tenant.key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"add_messages", "memories", "memory", "thread_context"} <= names

        async def called(tool: str, args: dict) -> object:
            result = await session.call_tool(tool, args)
            assert not _failed(result), _text(result)
            return json.loads(_text(result))

        said = "Carol is allergic to peanuts."
        first = await called("remember", {"content": said, "tags": {"topic": "health"}})
        again = await called("remember", {"content": said})
        assert first["op"] == "add" and again["op"] == "noop"
        assert again["memory"]["id"] == first["memory"]["id"]
        r = httpx.get(f"{live_url}/v1/memories", params={"subject": "user"}, headers=headers)
        assert [m["statement"] for m in r.json()["memories"]] == [said]

        added = await called(
            "add_messages",
            {"thread_id": "carol-1", "user_id": "carol",
             "messages": [{"role": "user", "name": "Carol", "content": "I live in Lyon.",
                           "time": "2024-01-05T08:00:00Z"},
                          {"role": "user", "name": "Carol",
                           "content": "I moved to Nantes last week.",
                           "time": "2024-04-02T08:00:00Z"}]},
        )  # fmt: skip
        assert added["extraction"] == "queued"
        assert added["messages"] == ["thread/carol-1/000000", "thread/carol-1/000001"]
        await digest(make_pipeline, client, tenant)

        now = await called("memories", {"user_id": "carol"})
        assert [(m["value"], m["current"]) for m in now] == [("Nantes", True)]
        then = await called("memories", {"user_id": "carol", "as_of": "2024-02-01T00:00:00Z"})
        assert [m["value"] for m in then] == ["Lyon"]
        every = await called("memories", {"subject": "Carol", "include_superseded": True})
        assert sorted(m["value"] for m in every) == ["Lyon", "Nantes"]
        lyon = next(m for m in every if m["value"] == "Lyon")
        one = await called("memory", {"id": lyon["id"]})
        assert one["superseded_by"] == now[0]["id"]
        assert [s["id"] for s in one["source_messages"]] == ["thread/carol-1/000000"]
        assert [h["value"] for h in one["history"]] == ["Lyon", "Nantes"]

        block = await session.call_tool(
            "thread_context", {"thread_id": "carol-1", "query": "Where does Carol live?"}
        )
        assert not _failed(block)
        assert "Carol lives in Nantes (unconfirmed)" in _text(block)
        assert "Carol lives in Lyon" not in _text(block)

        missing = await session.call_tool("memory", {"id": "mem/0000000000000000"})
        assert _failed(missing) and "note_not_found" in _text(missing)
        wrong = await session.call_tool(
            "add_messages", {"thread_id": "carol-1", "messages": [{"role": "narrator",
                                                                   "content": "Once"}]}
        )  # fmt: skip
        assert _failed(wrong) and "role" in _text(wrong)
        late = await session.call_tool(
            "add_messages",
            {"thread_id": "carol-1", "messages": [{"role": "user", "content": "hi",
                                                   "time": "someday"}]},
        )  # fmt: skip
        assert _failed(late) and "invalid time" in _text(late)
        mixed = await session.call_tool(
            "remember", {"content": said, "id": "a-note", "subject": "Carol"}
        )
        assert _failed(mixed) and "leave out id" in _text(mixed)
        # nothing of the refused calls was stored
        t = httpx.get(f"{live_url}/v1/threads/carol-1", headers=headers).json()
        assert t["messages"] == 2
        assert httpx.get(f"{live_url}/v1/notes/a-note", headers=headers).status_code == 404


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


async def test_reading_a_missing_note_is_not_found_and_logged_once(
    live_url, tenant, caplog
) -> None:
    """A missing note is the SDK's resource-not-found error (-32602, keepmem's
    reason in it), not an internal error (-32603) with a traceback logged per
    request; the SDK's lines are limited to one per kind per minute."""
    import logging

    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    caplog.set_level(logging.INFO, logger="mcp")
    headers = {"Authorization": f"Bearer {tenant.key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        for _ in range(5):
            with pytest.raises(MCPError) as refused:
                await session.read_resource("keepmem://nothing-here")
            assert refused.value.code == INVALID_PARAMS
            assert "note_not_found" in refused.value.message
    lines = [r for r in caplog.records if r.name.startswith("mcp") and "nothing-here" in r.message]
    assert len(lines) <= 1 and not any(r.exc_info for r in lines)
    assert not [r for r in caplog.records if r.name.startswith("mcp") and r.levelno >= 40]


async def test_a_wrong_content_type_is_a_json_415(live_url, tenant) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    r = httpx.post(
        f"{live_url}/mcp",
        content=json.dumps(message),
        headers={**tenant.headers, "Accept": "application/json", "Content-Type": "text/plain"},
    )
    assert r.status_code == 415 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["code"] == "unsupported_media_type" and "application/json" in body["error"]
    assert body["request_id"] == r.headers["x-request-id"]


ENVELOPES = {
    "id an object": {"jsonrpc": "2.0", "id": {}, "method": "tools/list"},
    "id a boolean": {"jsonrpc": "2.0", "id": True, "method": "tools/list"},
    "params a list": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]},
    "method a number": {"jsonrpc": "2.0", "id": 1, "method": 5},
    "old jsonrpc": {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
    "a batch": [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}],
    "too deep": {"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": [[[[[[]]]]]] * 1}},
}


@pytest.mark.parametrize("name", sorted(ENVELOPES))
async def test_a_message_that_is_not_jsonrpc_is_a_jsonrpc_400(live_url, tenant, name) -> None:
    """Checked before the MCP layer: an id it cannot answer would otherwise
    make the message a notification, silently dropped with a 202."""
    message = ENVELOPES[name]
    raw = json.dumps(message)
    if name == "too deep":
        raw = raw.replace("[[[[[[]]]]]]", "[" * 5000 + "]" * 5000)
    headers = {**tenant.headers, "Accept": "application/json, text/event-stream"}
    r = httpx.post(
        f"{live_url}/mcp", content=raw, headers={**headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body
    assert body["error"]["message"]


async def test_a_bad_project_and_a_delete_are_refused_in_the_error_shape(live_url, tenant) -> None:
    headers = {
        **tenant.headers,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    r = httpx.post(f"{live_url}/mcp", content=message, headers={**headers, "X-Project": "Bad!"})
    assert r.status_code == 400 and "invalid project slug" in r.json()["error"], r.text
    r = httpx.delete(f"{live_url}/mcp", headers=headers)
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST", r.text
    assert r.json()["code"] == "method_not_allowed"
    # the good message still works
    r = httpx.post(f"{live_url}/mcp", content=message, headers=headers)
    assert r.status_code == 200 and "tools" in r.json()["result"], r.text


async def test_get_streams_are_capped_per_tenant_and_end(settings, make_tenant) -> None:
    """GET /mcp (the server's event stream) holds one of the tenant's stream
    slots, shared with GET /v1/events: one past the cap is a 429 in the one
    error shape; every stream ends after mcp_stream_max_seconds."""
    import asyncio
    import time

    from app.main import create_app
    from tests.conftest import serving

    tenant, other = await make_tenant(), await make_tenant()
    app = create_app(
        settings.model_copy(
            update={"events_max_streams_per_tenant": 3, "mcp_stream_max_seconds": 2.0}
        )
    )
    sse = {"Accept": "text/event-stream"}
    with serving(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            opened = asyncio.Queue[int]()

            async def hold(who) -> float:
                began = time.monotonic()
                async with http.stream("GET", "/mcp", headers={**who.headers, **sse}) as r:
                    await opened.put(r.status_code)
                    async for _ in r.aiter_bytes():
                        pass
                return time.monotonic() - began

            async def statuses(streams: list[asyncio.Task[float]], count: int) -> list[int]:
                """The statuses the next ``count`` streams opened with; a
                stream that failed before opening raises its error here
                (waiting on the queue alone would wait forever)."""
                seen = []
                while len(seen) < count:
                    getter = asyncio.ensure_future(opened.get())
                    done, _ = await asyncio.wait(
                        {getter, *streams}, timeout=30, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        getter.cancel()
                        for failed in done:
                            failed.result()
                        raise AssertionError(f"no stream opened within 30 s: {seen}")
                    seen.append(getter.result())
                return seen

            held = [asyncio.create_task(hold(tenant)) for _ in range(3)]
            assert await statuses(held, 3) == [200, 200, 200]
            assert app.state.streams.open(tenant.id) == 3
            r = await http.get("/mcp", headers={**tenant.headers, **sse})
            assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
            assert r.json()["code"] == "rate_limited" and "streams" in r.json()["error"]
            r = await http.get("/v1/events", headers=tenant.headers)
            assert r.status_code == 429  # the same slots
            another = asyncio.create_task(hold(other))  # another tenant is not affected
            assert await statuses([another], 1) == [200]
            lasted = await asyncio.wait_for(asyncio.gather(*held, another), timeout=30)
            assert all(1.5 < seconds < 10 for seconds in lasted), lasted
            assert app.state.streams.open(tenant.id) == 0
            again = asyncio.create_task(hold(tenant))
            assert await statuses([again], 1) == [200]
            await asyncio.wait_for(again, timeout=30)


async def test_documents_over_mcp_ingest_find_cite_and_verify(
    settings, tenant, client, make_pipeline
) -> None:
    """A document ingested by URI (fetched by the worker) and one as base64
    content (a path would name the server's files), cut into passages,
    found with citations that verify valid; a stored citation; bad input
    and a refused crawl are tool errors with keepmem's reason."""
    import base64

    from app.main import create_app
    from tests.conftest import serving
    from tests.docserver import serving as web_serving
    from tests.test_grounding import NEEDLE, long_text, work

    local = {"fetch_allow_networks": ["127.0.0.1/32"], "rate_limit_per_minute": 0}
    headers = {"Authorization": f"Bearer {tenant.key}"}
    text = long_text()
    with web_serving() as web, serving(create_app(settings.model_copy(update=local))) as url:
        page = web.add(
            "/tides.txt", "Spring tides come two days after the full moon.", "text/plain"
        )
        r = httpx.patch(f"{url}/v1/settings", json={"keep_text": True}, headers=headers)
        assert r.status_code == 200, r.text
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert {"ingest", "find", "cite", "verify_citation", "distill", "crawl"} <= set(tools)
            ingest = tools["ingest"]
            schema = json.dumps(getattr(ingest, "input_schema", None) or ingest.inputSchema)
            assert "content_base64" in schema and '"path"' not in schema

            async def called(tool: str, args: dict) -> object:
                result = await session.call_tool(tool, args)
                assert not _failed(result), _text(result)
                return json.loads(_text(result))

            fetched = await called("ingest", {"uri": page, "tags": {"topic": "sea"}})
            assert fetched["id"] == page and fetched["pending"] == ["fetch"]
            content = base64.b64encode(text.encode()).decode()
            note = await called("ingest", {"content_base64": content, "filename": "report.md"})
            assert note["id"].startswith("%") and note["tags"]["filename"] == "report.md"
            await work(make_pipeline(**local), client, tenant)
            assert web.routes.hits == ["/tides.txt"]

            found = await called("find", {"query": "when do spring tides come?", "limit": 3})
            assert found["results"][0]["id"] == page
            assert found["results"][0]["citation"]["quote"] == (
                "Spring tides come two days after the full moon."
            )
            found = await called(
                "find", {"query": "who fixed the fog horn with a bicycle chain?", "limit": 5,
                         "per_document": 2}
            )  # fmt: skip
            hits = [h for h in found["results"] if h["id"].startswith(note["id"] + "@P{")]
            assert 0 < len(hits) <= 2 and found["citation_warning"] is None
            cited = next(h["citation"] for h in hits if NEEDLE in h["citation"]["quote"])
            assert cited["quote"] == text[cited["start"] : cited["end"]]
            verdict = await called("verify_citation", {"citation": cited})
            assert verdict["status"] == "valid", verdict
            stored = await called("cite", {"note": note["id"], "quote": NEEDLE})
            assert stored["quote"] == NEEDLE and stored["stored"] is True
            assert (await called("verify_citation", {"id": stored["id"]}))["status"] == "valid"
            made = await called(
                "distill", {"sources": [stored["id"]], "subject": "lighthouse",
                            "statement": "The fog horn was mended with a bicycle chain."}
            )  # fmt: skip
            assert made["op"] == "add" and made["rendered_by"] == "agent"
            assert made["provenance"][0]["citation"] == stored["id"]

            bad = await session.call_tool("ingest", {"content_base64": "%%%", "filename": "x.md"})
            assert _failed(bad) and "not base64" in _text(bad)
            neither = await session.call_tool("verify_citation", {})
            assert _failed(neither) and "one of id or citation" in _text(neither)
            missing = await session.call_tool("verify_citation", {"id": "cit_" + "0" * 20})
            assert _failed(missing) and "citation_not_found" in _text(missing)
            crawl = await session.call_tool(
                "crawl", {"uri": "http://169.254.169.254/", "max_depth": 0}
            )
            assert _failed(crawl) and "400" in _text(crawl)
