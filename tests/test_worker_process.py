"""Real worker processes against real Postgres and Redis: the whole pipeline,
a worker killed mid-job, and Redis going away while notes are put."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import text

from app import tenancy
from app.accounts import service as tenants
from app.db import Database
from app.main import create_app
from app.settings import Settings
from tests.conftest import SECRET, FreshDatabase, Stack
from tests.vendors import Vendor, VendorServer

LONG = (
    "The team moved the billing service to the new cluster over the weekend. "
    "Latency dropped by a third and the error budget recovered. "
    "Next week they will retire the old queue and write the postmortem. "
) * 5


class Workers:
    """Worker processes (``python -m worker``) with ``env`` (the test's own
    database, Redis and queue) over no ``KEEPMEM_*`` of the parent's; every
    one still running is stopped (SIGTERM, then killed) by ``stop``."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = {"KEEPMEM_DISPATCH_POLL_SECONDS": "0.1", **env}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **extra: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
        env.update({**self.env, **extra})
        proc = subprocess.Popen([sys.executable, "-m", "worker"], env=env)
        self.procs.append(proc)
        return proc

    def stop(self, timeout: float = 30.0) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()


@dataclass
class Env:
    settings: Settings
    db: Database
    client: httpx.AsyncClient
    headers: dict[str, str]
    tenant_id: uuid.UUID
    start_worker: Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
async def env(fresh_database: FreshDatabase, stack: Stack) -> AsyncIterator[Env]:
    queue = f"keepmem:test:{uuid.uuid4().hex[:8]}"
    settings = Settings(
        database_url=fresh_database.app_url,
        redis_url=stack.redis.url,
        secret_key=SECRET,
        queue_name=queue,
    )
    db = Database.from_settings(settings)
    async with tenancy.system_transaction(db) as s:
        new = await tenants.create_tenant(s, name="w", server_secret=SECRET)
    workers = Workers(
        {
            "KEEPMEM_DATABASE_URL": fresh_database.app_url,
            "KEEPMEM_REDIS_URL": stack.redis.url,
            "KEEPMEM_QUEUE_NAME": queue,
        }
    )

    app = create_app(settings, db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield Env(
                settings,
                db,
                client,
                {"Authorization": f"Bearer {new.key.secret}"},
                new.tenant.id,
                workers.start,
            )
    workers.stop(timeout=20)
    await db.dispose()


async def wait_for(check: Callable[[], object], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("timed out waiting")


async def no_open_jobs(env: Env) -> bool:
    async with tenancy.tenant_id_transaction(env.db, env.tenant_id) as s:
        n = (
            await s.execute(
                text(
                    "SELECT count(*) FROM jobs WHERE status IN ('pending', 'dispatched', 'running')"
                )
            )
        ).scalar_one()
    return n == 0


async def test_worker_process_embeds_summarises_and_analyses(env: Env) -> None:
    r = await env.client.post(
        "/v1/notes", json={"content": LONG, "id": "ops", "analyze": True}, headers=env.headers
    )
    assert set(r.json()["pending"]) == {"embed", "summarize", "analyze", "extract_graph"}
    env.start_worker()
    await wait_for(lambda: no_open_jobs(env))
    note = (await env.client.get("/v1/notes/ops", headers=env.headers)).json()
    assert note["pending"] == [] and not note["summary"].endswith("...")
    parts = (await env.client.get("/v1/notes/ops/parts", headers=env.headers)).json()
    assert parts["count"] >= 1
    r = await env.client.post(
        "/v1/search", json={"query": "faster payments after migration"}, headers=env.headers
    )
    assert r.json()["notes"][0]["id"] == "ops"
    done = (await env.client.get("/v1/jobs", params={"status": "done"}, headers=env.headers)).json()
    assert sorted(j["kind"] for j in done["jobs"]) == [
        "analyze",
        "embed",
        "extract_graph",
        "summarize",
    ]


def _slow_summarizer(vendor: VendorServer, **extra: str) -> dict[str, str]:
    """A worker's settings for summaries from the (slow) local vendor server."""
    return {
        "KEEPMEM_SUMMARIZATION_PROVIDER": "openai",
        "KEEPMEM_SUMMARIZATION_MODEL": "m",
        "KEEPMEM_SUMMARIZATION_BASE_URL": vendor.url + "/v1",
        **extra,
    }


async def test_killed_worker_mid_job_loses_nothing_and_does_nothing_twice(env: Env) -> None:
    with VendorServer(Vendor(delay=4.0, summary="Billing moved; latency down a third.")) as vendor:
        llm = _slow_summarizer(vendor, KEEPMEM_JOB_LEASE_SECONDS="3")
        await env.client.post("/v1/notes", json={"content": LONG, "id": "ops"}, headers=env.headers)
        first = env.start_worker(**llm)
        await wait_for(lambda: any("chat" in r["path"] for r in vendor.vendor.requests))
        first.kill()  # SIGKILL: no cleanup, the claim is left behind
        first.wait()
        jobs = (
            await env.client.get("/v1/jobs", params={"kind": "summarize"}, headers=env.headers)
        ).json()["jobs"]
        assert jobs[0]["status"] == "running" and jobs[0]["attempts"] == 1
        env.start_worker(**llm)
        await wait_for(lambda: no_open_jobs(env))
        job = (await env.client.get(f"/v1/jobs/{jobs[0]['id']}", headers=env.headers)).json()
        assert job["status"] == "done" and job["attempts"] == 2
        chats = [r for r in vendor.vendor.requests if "chat" in r["path"]]
        assert len(chats) == 2  # the interrupted call and the one that finished
    note = (await env.client.get("/v1/notes/ops", headers=env.headers)).json()
    assert note["summary"] == "Billing moved; latency down a third."
    async with tenancy.tenant_id_transaction(env.db, env.tenant_id) as s:
        updates = (
            await s.execute(
                text(
                    "SELECT count(*) FROM changes "
                    "WHERE entity_id = 'ops' AND mutation = 'doc_update'"
                )
            )
        ).scalar_one()
        versions = (await s.execute(text("SELECT count(*) FROM note_versions"))).scalar_one()
    assert (updates, versions) == (1, 0)  # the summary was applied exactly once


async def test_redis_down_while_putting_loses_no_jobs(env: Env, stack: Stack) -> None:
    env.start_worker()
    await env.client.post("/v1/notes", json={"content": "warm up", "id": "w0"}, headers=env.headers)
    await wait_for(lambda: no_open_jobs(env))
    stack.redis.stop()
    try:
        for i in range(12):
            r = await env.client.post(
                "/v1/notes",
                json={"content": f"note number {i} " * 30, "id": f"n{i}"},
                headers=env.headers,
            )
            assert r.status_code == 200, r.text
        ready = (await env.client.get("/v1/ready")).json()
        assert any("redis unavailable" in w for w in ready["warnings"])
        await asyncio.sleep(1.0)
        assert not await no_open_jobs(env)  # they wait in the outbox
    finally:
        stack.redis.start()
    await wait_for(lambda: no_open_jobs(env), timeout=120)
    async with tenancy.tenant_id_transaction(env.db, env.tenant_id) as s:
        embedded = (
            await s.execute(
                text(
                    "SELECT count(DISTINCT note_id) FROM embeddings "
                    "WHERE kind = 'note' AND note_id LIKE 'n%'"
                )
            )
        ).scalar_one()
        done = (
            await s.execute(
                text("SELECT count(*) FROM jobs WHERE note_id LIKE 'n%' AND status = 'done'")
            )
        ).scalar_one()
    assert embedded == 12 and done == 36  # embed, summarize and extract_graph for each


async def test_sigterm_lets_the_running_job_finish(env: Env) -> None:
    """Draining: SIGTERM stops a worker taking jobs, but the job it runs
    (a summary from a slow provider) finishes and is recorded once."""
    with VendorServer(Vendor(delay=3.0, summary="Billing moved; latency down a third.")) as vendor:
        llm = _slow_summarizer(vendor, KEEPMEM_WORKER_DRAIN_SECONDS="30")
        await env.client.post("/v1/notes", json={"content": LONG, "id": "ops"}, headers=env.headers)
        worker = env.start_worker(**llm)
        await wait_for(lambda: any("chat" in r["path"] for r in vendor.vendor.requests))
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 40) == 0
        chats = [r for r in vendor.vendor.requests if "chat" in r["path"]]
    jobs = (
        await env.client.get("/v1/jobs", params={"kind": "summarize"}, headers=env.headers)
    ).json()["jobs"]
    assert [(j["status"], j["attempts"]) for j in jobs] == [("done", 1)]
    assert len(chats) == 1
    note = (await env.client.get("/v1/notes/ops", headers=env.headers)).json()
    assert note["summary"] == "Billing moved; latency down a third."
