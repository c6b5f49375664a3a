"""keepmem behind a real PgBouncer in transaction pooling mode, with two
server connections shared by many client connections: writes, reads, find
(with its transaction-local planner settings), tag scopes (a transaction-
local role), the worker's jobs and the change feed all work; and the same
traffic without keepmem's PgBouncer settings fails, which is what the
settings are for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from app.db import Database
from app.main import create_app
from app.pipeline.runner import Pipeline
from app.settings import Settings
from tests.conftest import APP_ROLE, Stack, Tenant
from tests.pgbouncer import PgBouncer
from tests.test_pipeline import run_all


@pytest.fixture(scope="module")
def bouncer(stack: Stack) -> Iterator[PgBouncer]:
    b = PgBouncer(stack.pg, server_connections=2)
    b.start([APP_ROLE, "postgres"])
    yield b
    b.stop()


def _through(settings: Settings, bouncer: PgBouncer, *, pgbouncer: bool) -> Settings:
    return settings.model_copy(
        update={
            "database_url": bouncer.url(APP_ROLE, "keepmem"),
            "db_pgbouncer": pgbouncer,
            "db_pool_size": 8,
            "rate_limit_per_minute": 0,
        }
    )


@pytest.fixture
async def bounced(settings: Settings, bouncer: PgBouncer) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(_through(settings, bouncer, pgbouncer=True))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bounced") as c:
            yield c


async def _ok(response: Any) -> dict[str, Any]:
    r = await response
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


async def test_the_service_works_through_transaction_pooling(
    bounced, tenant: Tenant, settings: Settings, bouncer: PgBouncer, make_pipeline
) -> None:
    h = tenant.headers
    topics = ("ferry", "garden", "violin")
    # Many requests at once: 8 client connections take turns on 2 server ones.
    await asyncio.gather(
        *(
            _ok(bounced.post("/v1/notes", headers=h, json={
                "id": f"b-{i}", "content": f"a note about the {topics[i % 3]} number {i}",
                "tags": {"topic": topics[i % 3], "user": "alice" if i % 2 else "bob"}}))
            for i in range(30)
        )
    )  # fmt: skip
    await _ok(bounced.post("/v1/notes", headers=h, json={"id": "b-0", "content": "changed"}))
    listed = await _ok(bounced.get("/v1/notes", headers=h, params={"tag": "topic=garden"}))
    assert len(listed["notes"]) == 10
    found = await _ok(bounced.post("/v1/search", headers=h, json={"query": "violin"}))
    assert found["notes"] and all("violin" in r["summary"] for r in found["notes"][:3])
    versions = await _ok(bounced.get("/v1/notes/b-0/versions", headers=h))
    assert len(versions["versions"]) == 1
    await _ok(bounced.patch("/v1/notes/b-1/tags", headers=h, json={"set": {"seen": "1"}}))
    # A tag-scoped key (its transactions switch role, transaction-locally).
    sub = await _ok(bounced.post("/v1/subkeys", headers=h, json={
        "name": "alice", "tags": {"user": "alice"}, "scopes": ["read"],
        "expires_in_seconds": 600}))  # fmt: skip
    alice = {"Authorization": f"Bearer {sub['key']}"}
    seen = await asyncio.gather(
        *(_ok(bounced.get("/v1/notes", headers=alice, params={"limit": 100})) for _ in range(8)),
        *(_ok(bounced.get("/v1/notes", headers=h, params={"limit": 100})) for _ in range(8)),
    )
    assert all(len(s["notes"]) == 15 for s in seen[:8])
    assert all(len([n for n in s["notes"] if n["id"].startswith("b-")]) == 30 for s in seen[8:])
    # The worker through PgBouncer: embeddings, then find by meaning.
    pooled = Database(bouncer.url(APP_ROLE, "keepmem"), pool_size=4, pgbouncer=True)
    try:
        base: Pipeline = make_pipeline()
        pipeline = Pipeline(
            db=pooled,
            settings=base.settings,
            embedder=base.embedder,
            summarizer=base.summarizer,
            query_cache=base.query_cache,
        )
        outcomes = await run_all(pipeline, bounced, tenant)
        assert outcomes and set(outcomes) == {"done"}
    finally:
        await pooled.dispose()
    meaning = await _ok(bounced.post("/v1/search", headers=h, json={
        "query": "musical instrument", "stages": "vector"}))  # fmt: skip
    assert meaning["mode"] != "text" and "violin" in meaning["notes"][0]["summary"]
    changes = await _ok(bounced.get("/v1/export/changes", headers=h, params={"cursor": "0"}))
    assert len(changes["events"]) >= 31
    r = await bounced.delete("/v1/notes/b-2", headers=h)
    assert r.status_code == 200


async def test_without_the_settings_prepared_statements_collide(
    settings: Settings, bouncer: PgBouncer, tenant: Tenant
) -> None:
    """The control: asyncpg's default statement cache through transaction
    pooling fails (so the test above shows the settings matter)."""
    app = create_app(_through(settings, bouncer, pgbouncer=False))
    failures = 0
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://plain") as c:
            for _ in range(3):
                answers = await asyncio.gather(
                    *(c.get("/v1/notes", headers=tenant.headers) for _ in range(24)),
                    return_exceptions=True,
                )
                failures += sum(
                    1 for a in answers if isinstance(a, Exception) or a.status_code >= 500
                )
    assert failures > 0
