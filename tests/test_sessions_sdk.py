"""Coding-agent sessions read back through the SDK (sync and async, over a
live server) and through the MCP tools at /mcp: sessions, timelines,
checkpoints, patterns, resume blocks, opt-outs, collections, tenancy, and
which of these calls are retried."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest
from keepmem_client import (
    AsyncKeepmem,
    Keepmem,
    NotFoundError,
    Pattern,
    ServiceUnavailableError,
    Session,
)
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Tenant
from tests.test_mcp_http import _failed, _text
from tests.test_sessions import digest, ev, failing_test

CWD = "/home/dev/shop"
SUMMARY = (
    "Summary of the work so far.\n\nPending Tasks:\n- Ship the thing\n\n"
    "Decision: keep prices in Decimal\n"
)


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def _two_sessions_with_one_error(first: str, second: str) -> list[dict[str, Any]]:
    """The same failing test in two sessions, a decision in the first and a
    compaction in the second."""
    return [
        ev(first, "prompt", cwd=CWD, prompt="make the cart tests pass"),
        failing_test(first, 3, 41),
        ev(first, "stop", message="Not yet.\nDecision: keep prices in Decimal"),
        ev(second, "prompt", cwd=CWD, prompt="make the cart tests pass again"),
        failing_test(second, 3, 41),
        ev(second, "pre_compact", trigger="auto"),
        ev(second, "post_compact", trigger="auto", compact_summary=SUMMARY),
    ]


async def test_sync_client_reads_sessions_back(live_url, tenant, client, make_pipeline) -> None:
    first, second = _sid(), _sid()
    with Keepmem(live_url, tenant.key) as km:
        intake = km.session_events(_two_sessions_with_one_error(first, second))
        assert intake.accepted == 7 and intake.dropped == 0
        assert {s.session_id: s.capture for s in intake.sessions} == {first: True, second: True}
        await digest(make_pipeline, client, tenant)

        listed = km.sessions()
        assert all(isinstance(s, Session) for s in listed)
        assert {s.session_id for s in listed} == {first, second}
        assert {s.cwd for s in listed} == {CWD}
        assert km.sessions(cwd="/somewhere/else") == []
        assert len(km.sessions(limit=1)) == 1
        one = km.session(first)
        assert one.platform == "claude-code" and one.counts["tool_failure"] == 1

        everything = km.session_timeline(first)
        kinds = [i.kind for i in everything.items]
        assert {"prompt", "tool_failure"} <= set(kinds)
        failures = km.session_timeline(first, kind="tool_failure")
        assert [i.kind for i in failures.items] == ["tool_failure"]
        assert "AssertionError" in failures.items[0].summary
        page = km.session_timeline(first, limit=1)
        assert len(page.items) == 1 and page.next_cursor
        rest = km.session_timeline(first, limit=500, cursor=page.next_cursor)
        assert page.items[0].id not in {i.id for i in rest.items}
        assert [page.items[0].id, *(i.id for i in rest.items)] == [i.id for i in everything.items]

        (cp,) = km.session_checkpoints(second)
        assert cp.trigger == "compaction" and "Ship the thing" in cp.text
        assert km.session_checkpoints(first) == []

        (error,) = km.session_patterns(kind="error")
        assert isinstance(error, Pattern)
        assert error.count == 2 and error.sessions == 2
        assert set(error.session_ids) == {first, second}
        assert "tests/test_cart.py" in error.files
        (decision,) = km.session_patterns(kind=["decision", "preference"], limit=5)
        assert decision.kind == "decision" and decision.session_ids == [first]
        assert "keep prices in Decimal" in decision.template
        assert {p.kind for p in km.session_patterns()} == {"error", "decision"}

        block = km.resume_context(cwd=CWD)
        assert block.inject and block.chars == len(block.context) > 0
        assert "Ship the thing" in block.context

        off = km.set_session(second, inject=False)
        assert off.session_id == second and off.inject is False and off.capture is True
        assert km.session(second).inject is False
        quiet = km.resume_context(cwd=CWD, session_id=second)
        assert (quiet.context, quiet.chars, quiet.inject) == ("", 0, False)


async def test_async_client_checkpoints_settings_and_collections(
    live_url, tenant, client, make_pipeline
) -> None:
    sid = _sid()
    async with AsyncKeepmem(live_url, tenant.key) as km:
        await km.session_events([failing_test(sid, 3, 41)])
        asked = await km.checkpoint(sid, note="Ship the thing before Friday")
        assert asked.session_id == sid
        await digest(make_pipeline, client, tenant)
        (cp,) = await km.session_checkpoints(sid)
        assert cp.trigger == "request"
        timeline = await km.session_timeline(sid, kind="checkpoint")
        assert [i.id for i in timeline.items] == [cp.id]

        saved = await km.save_collection(
            "failures", tags={"event": "tool_failure"}, description="every failure"
        )
        assert (saved.name, saved.tags, saved.description) == (
            "failures",
            {"event": "tool_failure"},
            "every failure",
        )
        assert [c.name for c in await km.collections()] == ["failures"]
        run = await km.collection("failures")
        assert run.name == "failures"
        assert [i.tags["session"] for i in run.items] == [sid]
        markdown = await km.export_collection("failures")
        assert markdown.startswith("# failures") and run.items[0].id in markdown
        as_json = json.loads(await km.export_collection("failures", format="json"))
        assert as_json["collection"] == "failures"
        assert [i["id"] for i in as_json["items"]] == [run.items[0].id]
        text = await km.export_collection("failures", format="text")
        assert text.split("\t")[0] == run.items[0].id
        assert await km.delete_collection("failures") is None
        assert await km.collections() == []
        with pytest.raises(NotFoundError):
            await km.collection("failures")

        settings = await km.session_settings()
        assert settings.capture and settings.inject and settings.excludes
        assert (await km.resume_context(cwd=CWD)).context
        changed = await km.set_session_settings(inject=False, resume_chars=2000)
        assert changed.inject is False and changed.resume_chars == 2000
        assert changed.capture is True  # left out: kept
        again = await km.session_settings()
        assert (again.inject, again.resume_chars) == (False, 2000)
        block = await km.resume_context(cwd=CWD)
        assert block.context == "" and block.inject is False


async def test_another_tenants_session_is_not_found(
    live_url, tenant: Tenant, other_tenant: Tenant
) -> None:
    sid = _sid()
    with Keepmem(live_url, tenant.key) as mine:
        mine.session_events([ev(sid, "prompt", cwd=CWD, prompt="hello")])
        assert mine.session(sid).session_id == sid
    with Keepmem(live_url, other_tenant.key) as theirs:
        for read in (
            lambda: theirs.session(sid),
            lambda: theirs.session_timeline(sid),
            lambda: theirs.session_checkpoints(sid),
            lambda: theirs.set_session(sid, capture=False),
            lambda: theirs.checkpoint(sid),
        ):
            with pytest.raises(NotFoundError) as missing:
                read()
            assert missing.value.status == 404 and missing.value.code == "session_not_found"
        assert theirs.sessions() == []
    async with AsyncKeepmem(live_url, other_tenant.key) as theirs_async:
        with pytest.raises(NotFoundError) as missing:
            await theirs_async.session(sid)
        assert missing.value.code == "session_not_found"


async def test_mcp_tools_read_sessions(live_url, tenant, client, make_pipeline) -> None:
    first, second = _sid(), _sid()
    async with AsyncKeepmem(live_url, tenant.key) as km:
        await km.session_events(_two_sessions_with_one_error(first, second))
    await digest(make_pipeline, client, tenant)
    headers = {"Authorization": f"Bearer {tenant.key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"sessions", "session_timeline", "session_patterns", "resume_context"} <= names

        patterns = await session.call_tool("session_patterns", {"kind": "error"})
        assert not _failed(patterns)
        (error,) = json.loads(_text(patterns))
        assert error["count"] == 2 and set(error["session_ids"]) == {first, second}

        resumed = await session.call_tool("resume_context", {"cwd": CWD})
        assert not _failed(resumed)
        assert "Ship the thing" in _text(resumed)

        listed = json.loads(_text(await session.call_tool("sessions", {"cwd": CWD})))
        assert {s["session_id"] for s in listed} == {first, second}
        timeline = await session.call_tool(
            "session_timeline", {"session_id": first, "kind": "tool_failure"}
        )
        assert [i["kind"] for i in json.loads(_text(timeline))["items"]] == ["tool_failure"]

        missing = await session.call_tool("session_timeline", {"session_id": "no-such-session"})
        assert _failed(missing) and "session_not_found" in _text(missing)
        wrong = await session.call_tool("session_patterns", {"kind": "weather"})
        assert _failed(wrong)

        await session.call_tool("sessions", {})  # the client stays usable after an error
        async with AsyncKeepmem(live_url, tenant.key) as km:
            await km.set_session_settings(inject=False)
        quiet = await session.call_tool("resume_context", {"cwd": CWD})
        assert not _failed(quiet)
        assert "Ship the thing" not in _text(quiet) and "injection is off" in _text(quiet)


# -- what is retried: a real server that is always down ------------------------------


@contextmanager
def _down() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server answering every request 503, and what it was sent."""
    seen: list[str] = []
    body = json.dumps(
        {"error": "database unavailable", "code": "database_unavailable", "request_id": "r1"}
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append(f"{self.command} {self.path.split('?')[0]}")
            self.send_response(503)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_reads_are_retried_and_recording_events_is_not() -> None:
    with _down() as (url, seen), Keepmem(url, "k", max_retries=1) as km:
        with pytest.raises(ServiceUnavailableError):
            km.session_timeline("s1")
        assert seen == ["GET /v1/sessions/s1/timeline"] * 2
        seen.clear()
        with pytest.raises(ServiceUnavailableError):
            km.export_collection("failures")
        assert seen == ["GET /v1/collections/failures/export"] * 2
        seen.clear()
        writes = (
            lambda: km.session_events([ev("s1", "prompt", prompt="hi")]),
            lambda: km.checkpoint("s1"),
            lambda: km.set_session("s1", inject=False),
            lambda: km.set_session_settings(capture=False),
            lambda: km.save_collection("failures", query="error"),
            lambda: km.delete_collection("failures"),
        )
        for write in writes:
            with pytest.raises(ServiceUnavailableError):
                write()
        assert seen == [
            "POST /v1/sessions/events",
            "POST /v1/sessions/s1/checkpoint",
            "PATCH /v1/sessions/s1",
            "PUT /v1/sessions/settings",
            "PUT /v1/collections/failures",
            "DELETE /v1/collections/failures",
        ]
