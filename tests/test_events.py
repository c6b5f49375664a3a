"""GET /v1/events: Server-Sent Events of a project's writes, read by a real
SSE client (httpx-sse) from keepmem served by uvicorn — live delivery,
resumption with Last-Event-ID, filters, the worker's events, isolation
between tenants and tag scopes, heartbeats, bad input, and SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.cli.embedded import free_port
from app.main import create_app
from app.settings import Settings
from tests.conftest import SECRET, Stack, Tenant, serving
from tests.test_pipeline import LONG, run_all

FAST = {
    "events_poll_seconds": 0.05,
    "events_heartbeat_seconds": 0.3,
    "events_max_streams_per_tenant": 4,
    "rate_limit_per_minute": 0,
    "auth_failures_per_minute": 0,
}


@pytest.fixture(scope="module")
def live(settings: Settings) -> Iterator[tuple[str, Any]]:
    app = create_app(settings.model_copy(update=FAST))
    with serving(app) as url:
        yield url, app


class Watcher:
    """An open event stream, collecting what arrives in the background."""

    def __init__(self, base: str, headers: dict[str, str], **params: Any) -> None:
        self.base, self.headers, self.params = base, headers, params
        self.events: list[Any] = []
        self.opened = asyncio.Event()
        self.ended = asyncio.Event()
        self.status: int | None = None

    async def _run(self) -> None:
        try:
            async with (
                httpx.AsyncClient(base_url=self.base, timeout=30) as http,
                aconnect_sse(
                    http, "GET", "/v1/events", params=self.params, headers=self.headers
                ) as source,
            ):
                self.status = source.response.status_code
                self.opened.set()
                async for sse in source.aiter_sse():
                    self.events.append(sse)
        finally:
            self.opened.set()
            self.ended.set()

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Watcher]:
        task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.opened.wait(), 10)
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def data(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [json.loads(e.data) for e in self.events if e.event == (kind or e.event) and e.data]

    async def wait_for(self, count: int, *, timeout: float = 10) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.data()) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.data()


async def _put(http: httpx.AsyncClient, t: Tenant, note_id: str, **body: Any) -> None:
    r = await http.post("/v1/notes", json={"id": note_id, "content": body.pop("content", note_id),
                                            **body}, headers=t.headers)  # fmt: skip
    assert r.status_code == 200, r.text


async def test_writes_arrive_live_in_order_with_summary_and_tags(live, tenant) -> None:
    base, _ = live
    async with (
        Watcher(base, tenant.headers).open() as w,
        httpx.AsyncClient(base_url=base) as http,
    ):
        assert w.status == 200
        await _put(http, tenant, "ev-a", content="the ferry leaves at nine", tags={"topic": "x"})
        r = await http.patch("/v1/notes/ev-a/tags", json={"set": {"mood": "calm"}},
                             headers=tenant.headers)  # fmt: skip
        assert r.status_code == 200, r.text
        await _put(http, tenant, "ev-b", content="a note to delete", tags={"topic": "y"})
        r = await http.delete("/v1/notes/ev-b", headers=tenant.headers)
        assert r.status_code == 200, r.text
        got = await w.wait_for(4)
    assert [(e["kind"], e["note_id"]) for e in got] == [
        ("put", "ev-a"),
        ("tag", "ev-a"),
        ("put", "ev-b"),
        ("delete", "ev-b"),
    ]
    assert [e.id for e in w.events if e.data] == [e["id"] for e in got]
    assert len({e["id"] for e in got}) == 4  # random ids: the order is the stream's
    assert got[1]["tags"] == {"topic": "x", "mood": "calm"}
    assert "ferry" in got[0]["summary"]
    # A deleted note is shown as it was when deleted.
    assert got[3]["summary"] == "a note to delete" and got[3]["tags"] == {"topic": "y"}
    assert all(e["project"] == "default" for e in got)


async def test_resuming_with_last_event_id_misses_nothing(live, tenant) -> None:
    base, _ = live
    async with httpx.AsyncClient(base_url=base) as http:
        async with Watcher(base, tenant.headers).open() as w:
            await _put(http, tenant, "r-1")
            first = (await w.wait_for(1))[0]
        # Written while nobody watches.
        for n in (2, 3, 4):
            await _put(http, tenant, f"r-{n}")
        resumed = Watcher(base, {**tenant.headers, "Last-Event-ID": str(first["id"])})
        async with resumed.open():
            got = await resumed.wait_for(3)
        # The same through the query (EventSource cannot set headers on its first try).
        by_query = Watcher(base, tenant.headers, after=first["id"])
        async with by_query.open():
            again = await by_query.wait_for(3)
    assert [e["note_id"] for e in got] == ["r-2", "r-3", "r-4"]
    assert [e["id"] for e in again] == [e["id"] for e in got]


async def test_filters_by_kind_and_tag(live, tenant) -> None:
    base, _ = live
    async with (
        Watcher(base, tenant.headers, kind="tag", tag="topic=work").open() as tags_only,
        Watcher(base, tenant.headers, kind="put,delete").open() as puts,
        httpx.AsyncClient(base_url=base) as http,
    ):
        await _put(http, tenant, "f-work", tags={"topic": "Work"})
        await _put(http, tenant, "f-home", tags={"topic": "home"})
        for note in ("f-work", "f-home"):
            r = await http.patch(f"/v1/notes/{note}/tags", json={"set": {"seen": "yes"}},
                                 headers=tenant.headers)  # fmt: skip
            assert r.status_code == 200
        await asyncio.sleep(0.5)
        got_puts = await puts.wait_for(2)
    # Tag values match case-insensitively, as everywhere else.
    assert [(e["kind"], e["note_id"]) for e in tags_only.data()] == [("tag", "f-work")]
    assert [(e["kind"], e["note_id"]) for e in got_puts] == [("put", "f-work"), ("put", "f-home")]


async def test_the_workers_summary_and_embedding_are_events(
    live, client, tenant, make_pipeline
) -> None:
    base, _ = live
    async with (
        Watcher(base, tenant.headers, kind=["summary", "embedding"]).open() as w,
        httpx.AsyncClient(base_url=base) as http,
    ):
        await _put(http, tenant, "long-1", content=LONG)
        await run_all(make_pipeline(), client, tenant)
        got = await w.wait_for(2)
    assert sorted(e["kind"] for e in got) == ["embedding", "summary"]
    assert {e["note_id"] for e in got} == {"long-1"}
    summary = next(e for e in got if e["kind"] == "summary")["summary"]
    assert summary and summary != LONG


async def test_tenants_and_tag_scopes_see_only_their_own(
    live, tenant, other_tenant, client
) -> None:
    base, _ = live
    r = await client.post(
        "/v1/subkeys",
        headers=tenant.headers,
        json={"name": "alice", "tags": {"user": "alice"}, "expires_in_seconds": 600,
              "scopes": ["read"]},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    alice = {"Authorization": f"Bearer {r.json()['key']}"}
    async with (
        Watcher(base, other_tenant.headers).open() as other,
        Watcher(base, alice).open() as scoped,
        Watcher(base, tenant.headers).open() as owner,
        httpx.AsyncClient(base_url=base) as http,
    ):
        await _put(http, tenant, "s-alice", tags={"user": "alice"})
        await _put(http, tenant, "s-bob", tags={"user": "bob"})
        r = await http.delete("/v1/notes/s-bob", headers=tenant.headers)
        assert r.status_code == 200
        await _put(http, other_tenant, "theirs")
        await owner.wait_for(3)
        await other.wait_for(1)
        await asyncio.sleep(0.5)  # anything that would leak has had time to
    assert [e["note_id"] for e in owner.data()] == ["s-alice", "s-bob", "s-bob"]
    assert [e["note_id"] for e in other.data()] == ["theirs"]
    assert [e["note_id"] for e in scoped.data()] == ["s-alice"]


async def test_idle_streams_get_heartbeats(live, tenant) -> None:
    base, _ = live
    lines: list[str] = []
    async with (
        httpx.AsyncClient(base_url=base, timeout=10) as http,
        http.stream("GET", "/v1/events", headers=tenant.headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.5):
                async for line in response.aiter_lines():
                    lines.append(line)
    assert lines[0] == "retry: 2000"
    assert lines.count(": keepalive") >= 2


async def test_bad_requests_get_clear_4xx(live, tenant) -> None:
    base, app = live
    async with httpx.AsyncClient(base_url=base) as http:
        cases = [
            ({"Last-Event-ID": "abc"}, {}, 400, "Last-Event-ID"),
            ({}, {"kind": "nope"}, 400, "unknown event kind"),
            ({}, {"tag": "novalue"}, 400, "key=value"),
            ({}, {"after": "-1"}, 400, "after"),
            ({}, {"after": "99999999999999999999"}, 400, "after"),
            ({"Last-Event-ID": "4812"}, {}, 400, "Last-Event-ID"),
        ]
        for extra, params, status, words in cases:
            r = await http.get("/v1/events", headers={**tenant.headers, **extra}, params=params)
            assert r.status_code == status, r.text
            assert words in r.json()["error"]
        r = await http.get("/v1/events")
        assert r.status_code == 401
    # The per-tenant cap on open streams.
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(4):
            await stack.enter_async_context(Watcher(base, tenant.headers).open())
        async with httpx.AsyncClient(base_url=base) as http:
            r = await http.get("/v1/events", headers=tenant.headers)
        assert r.status_code == 429
        assert "event streams" in r.json()["error"]
    await asyncio.sleep(0.3)
    assert app.state.streams.open(tenant.id) == 0  # closed streams are counted out


def test_sigterm_ends_streams_and_the_server_exits(stack: Stack, tenant: Tenant) -> None:
    """`keepmem serve` drains on SIGTERM: open streams get `event: shutdown`
    and end, so the process exits well inside its grace period (30 s)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
    env |= {
        "KEEPMEM_DATABASE_URL": stack.app_url,
        "KEEPMEM_REDIS_URL": stack.redis.url,
        "KEEPMEM_SECRET_KEY": SECRET,
        "KEEPMEM_EVENTS_POLL_SECONDS": "0.1",
        "KEEPMEM_LOG_LEVEL": "INFO",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", "from app.cli import main; main()", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/v1/health").status_code == 200:
                    break
            time.sleep(0.2)
        lines: list[str] = []
        with httpx.stream(
            "GET", f"http://127.0.0.1:{port}/v1/events", headers=tenant.headers, timeout=30
        ) as response:
            assert response.status_code == 200
            sent_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            lines.extend(response.iter_lines())  # ends when the server ends the stream
        ended_after = time.monotonic() - sent_at
        assert "event: shutdown" in lines
        # uvicorn re-raises the signal once it has shut down cleanly.
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        assert ended_after < 10
        assert proc.stderr is not None
        logged = [json.loads(line) for line in proc.stderr.read().splitlines() if line.strip()]
        # JSON lines (the default format), uvicorn's own included; no errors.
        assert any("Shutting down" in line["message"] for line in logged)
        assert all(line["level"] in ("INFO", "WARNING") for line in logged), logged
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
