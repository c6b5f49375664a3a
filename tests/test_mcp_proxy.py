"""keepmem-mcp through a real MCP client session over stdio (the official
``mcp`` SDK on both ends), against a live keepmem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
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
                              "forget", "versions", "add_messages", "memories", "memory",
                              "thread_context", "sessions", "session_timeline",
                              "session_patterns", "resume_context", "ingest", "find", "cite",
                              "verify_citation", "distill", "crawl", "entities", "walk",
                              "stats"}  # fmt: skip
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


async def test_a_projects_own_prompt_is_listed_as_soon_as_it_is_added(
    live_url, tenant, other_tenant
) -> None:
    """The prompts are listed per request from the project's notes: one
    added while the proxy runs (with an mcp_prompt tag naming its
    arguments) is listed and renders; another tenant's proxy never lists it."""
    import httpx
    from mcp.shared.exceptions import MCPError

    content = "# Mine\n\nThe project's own prompt.\n\n## Prompt\n\nTell me about {text}."
    async with (
        stdio_client(_params(live_url, tenant.key)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        before = {p.name for p in (await session.list_prompts()).prompts}
        assert "reflect" in before and "mine" not in before
        r = httpx.post(
            f"{live_url}/v1/notes",
            json={"id": ".prompt/agent/mine", "content": content, "tags": {"mcp_prompt": "text"}},
            headers=tenant.project("agent"),
        )
        assert r.status_code == 200, r.text
        listed = {p.name: p for p in (await session.list_prompts()).prompts}
        assert [a.name for a in listed["mine"].arguments or []] == ["text"]
        rendered = await session.get_prompt("mine", {"text": "tides"})
        text = "".join(getattr(m.content, "text", "") for m in rendered.messages)
        assert "Tell me about tides." in text
    async with (
        stdio_client(_params(live_url, other_tenant.key)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        theirs = {p.name for p in (await session.list_prompts()).prompts}
        assert "reflect" in theirs and "mine" not in theirs
        with pytest.raises(MCPError, match="mine"):
            await session.get_prompt("mine", {"text": "tides"})


async def test_an_agent_remembers_a_memory_once_and_reads_its_thread(live_url, tenant) -> None:
    """Without an id, remember is a memory: the same sentence twice is one
    memory (the second a noop); a new value of its slot supersedes it. A
    conversation handed to add_messages is stored and is in the thread's
    context at once (extraction runs later, in the worker)."""
    async with (
        stdio_client(_params(live_url, tenant.key)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def called(tool: str, args: dict) -> object:
            result = await session.call_tool(tool, args)
            assert not _failed(result), _text(result)
            return json.loads(_text(result))

        said = "Bob takes the 7:40 ferry to work."
        first = await called("remember", {"content": said, "tags": {"topic": "travel"}})
        again = await called("remember", {"content": said})
        assert (first["op"], again["op"]) == ("add", "noop")
        assert again["memory"]["id"] == first["memory"]["id"]
        held = await called("memories", {"subject": "user"})
        assert [m["statement"] for m in held] == [said]

        city = {"subject": "Bob", "attribute": "lives_in"}
        oslo = await called("remember", {"content": "Bob lives in Oslo.", **city, "value": "Oslo"})
        bergen = await called(
            "remember", {"content": "Bob lives in Bergen.", **city, "value": "Bergen"}
        )
        assert bergen["op"] == "supersede" and bergen["superseded"] == [oslo["memory"]["id"]]
        assert [m["value"] for m in await called("memories", {"subject": "Bob"})] == ["Bergen"]
        every = await called("memories", {"subject": "Bob", "include_superseded": True})
        assert sorted(m["value"] for m in every) == ["Bergen", "Oslo"]
        one = await called("memory", {"id": oslo["memory"]["id"]})
        assert one["current"] is False and one["superseded_by"] == bergen["memory"]["id"]
        assert sorted(h["value"] for h in one["history"]) == ["Bergen", "Oslo"]

        added = await called(
            "add_messages",
            {"thread_id": "ferry-chat", "user_id": "bob",
             "messages": [{"role": "user", "content": "Is the ferry on time?", "name": "Bob"},
                          {"role": "assistant", "content": "It leaves at 7:40."}]},
        )  # fmt: skip
        assert added["extraction"] == "queued" and len(added["messages"]) == 2
        block = await session.call_tool("thread_context", {"thread_id": "ferry-chat"})
        assert not _failed(block)
        assert "Bob: Is the ferry on time?" in _text(block) and "It leaves at 7:40." in _text(block)

        # a note under an id is still a note
        note = await called("remember", {"content": said, "id": "ferry-note"})
        assert note["id"] == "ferry-note" and "op" not in note
        missing = await session.call_tool("thread_context", {"thread_id": "no-such-thread"})
        assert _failed(missing) and "note_not_found" in _text(missing)


async def test_an_agent_ingests_a_file_finds_it_cited_and_verifies(
    live_url, tenant, client, make_pipeline, tmp_path
) -> None:
    """ingest reads a path on the proxy's machine; the worker cuts the
    document into passages; find cites them, verify_citation says valid,
    then changed once the file is ingested again with the sentence edited."""
    import httpx

    from tests.test_grounding import NEEDLE, long_text
    from tests.test_pipeline import run_job

    agent = tenant.project("agent")
    r = httpx.patch(f"{live_url}/v1/settings", json={"keep_text": True}, headers=agent)
    assert r.status_code == 200, r.text
    text = long_text()
    document = tmp_path / "report.md"
    document.write_text(text)

    async def work() -> None:  # the worker, for the proxy's project
        pipeline = make_pipeline()
        for _ in range(3):
            r = await client.get("/v1/jobs", params={"status": "pending"}, headers=agent)
            for job in reversed(r.json()["jobs"]):
                await run_job(pipeline, tenant, job["id"])

    async with (
        stdio_client(_params(live_url, tenant.key)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def called(tool: str, args: dict) -> object:
            result = await session.call_tool(tool, args)
            assert not _failed(result), _text(result)
            return json.loads(_text(result))

        note = await called("ingest", {"path": str(document), "tags": {"kind": "report"}})
        assert note["id"].startswith("%") and note["tags"]["filename"] == "report.md"
        await work()
        found = await called("find", {"query": "who fixed the fog horn with a bicycle chain?"})
        cited = next(
            h["citation"] for h in found["results"]
            if h.get("citation") and NEEDLE in h["citation"]["quote"]
        )  # fmt: skip
        assert cited["note"] == note["id"] and cited["quote"] == text[cited["start"] : cited["end"]]
        assert (await called("verify_citation", {"citation": cited}))["status"] == "valid"
        stored = await called("cite", {"note": note["id"], "quote": NEEDLE})
        part = {"note": note["id"], "part": cited["part"]}
        made = await called("distill", {"sources": [part], "statement": "Chains mend horns."})
        assert made["provenance"][0]["target"] == f"{note['id']}@P{{{cited['part']}}}"
        wrong = await session.call_tool("distill", {"sources": [part], "prompt": "poems"})
        assert _failed(wrong) and "prompt" in _text(wrong)
        document.write_text(text.replace("bicycle chain", "length of rope"))
        again = await called("ingest", {"path": str(document), "id": note["id"]})
        assert again["id"] == note["id"]
        verdict = await called("verify_citation", {"id": stored["id"]})
        assert verdict["status"] == "changed" and "no longer" in verdict["diagnosis"]

        missing = await session.call_tool("ingest", {"path": str(tmp_path / "nope.pdf")})
        assert _failed(missing) and "cannot read" in _text(missing)
        both = await session.call_tool("ingest", {"path": str(document), "uri": "https://x.org"})
        assert _failed(both) and "one of uri or path" in _text(both)


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
