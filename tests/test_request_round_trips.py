"""An authenticated request talks to Redis once (``app.ratelimit.admit``):
the key's rate limit, the tenant's count of the day and the key-revocation
epoch in one script. Counted on the app's real Redis connections, not a mock."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio.connection import AbstractConnection

from app.cli.embedded import free_port
from app.main import create_app
from tests.conftest import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@contextlib.asynccontextmanager
async def _serving(
    settings, db, **overrides: object
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings.model_copy(update=overrides), db=db)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield app, client


@contextlib.contextmanager
def _round_trips(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every command (or pipeline) the app's Redis client writes to a
    connection: one write, one round trip."""
    sent: list[object] = []
    original = AbstractConnection.send_packed_command
    pool = app.state.redis.connection_pool

    async def counting(self, command, check_health=True):  # type: ignore[no-untyped-def]
        if self in pool._available_connections or self in pool._in_use_connections:
            sent.append(command)
        return await original(self, command, check_health)

    with monkeypatch.context() as patch:
        patch.setattr(AbstractConnection, "send_packed_command", counting)
        yield sent


def _bytes(command: object) -> bytes:
    return command if isinstance(command, bytes) else b"".join(command)  # type: ignore[arg-type]


async def test_an_authenticated_request_makes_one_redis_round_trip(
    settings, db, tenant, monkeypatch
) -> None:
    async with _serving(settings, db, rate_limit_per_minute=1000) as (app, c):
        for _ in range(3):  # the process learns the revocation epoch; the key is cached
            assert (await c.get("/v1/notes", headers=tenant.headers)).status_code == 200
        day = time.strftime("%Y%m%d", time.gmtime())
        before = int(await app.state.redis.get(f"keepmem:quota:requests:{tenant.id}:{day}"))
        with _round_trips(app, monkeypatch) as sent:
            responses = [await c.get("/v1/notes", headers=tenant.headers) for _ in range(10)]
            reads = len(sent)
            r = await c.post("/v1/notes", headers=tenant.headers, json={"content": "x"})
            assert r.status_code == 200, r.text
            writes = len(sent) - reads
        assert reads == 10 and writes == 1
        assert all(b"EVALSHA" in _bytes(command) for command in sent)
        assert [r.status_code for r in responses] == [200] * 10
        # the same answers as before: the bucket's headers, the day's count
        remaining = [int(r.headers["x-ratelimit-remaining"]) for r in responses]
        assert remaining == sorted(remaining, reverse=True) and remaining[0] < 1000
        assert all(r.headers["x-ratelimit-limit"] == "1000" for r in responses)
        after = int(await app.state.redis.get(f"keepmem:quota:requests:{tenant.id}:{day}"))
        assert after == before + 11


async def test_a_rate_limited_request_is_not_counted_against_the_day(
    settings, db, make_tenant
) -> None:
    async with _serving(settings, db, rate_limit_per_minute=2) as (app, c):
        t = await make_tenant()
        codes = [(await c.get("/v1/notes", headers=t.headers)).status_code for _ in range(5)]
        assert codes == [200, 200, 429, 429, 429]
        day = time.strftime("%Y%m%d", time.gmtime())
        assert int(await app.state.redis.get(f"keepmem:quota:requests:{t.id}:{day}")) == 2


async def test_the_daily_quota_still_refuses_with_retry_after(settings, db, tenant) -> None:
    async with _serving(settings, db) as (_, c):
        r = await c.put(
            f"/v1/admin/tenants/{tenant.id}/quotas", json={"requests_per_day": 2}, headers=ADMIN
        )
        assert r.status_code == 200, r.text
        codes = [(await c.get("/v1/notes", headers=tenant.headers)).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        r = await c.get("/v1/notes", headers=tenant.headers)
        assert r.json()["code"] == "quota_exceeded" and int(r.headers["retry-after"]) > 0


async def test_with_redis_down_requests_pass_and_the_log_says_so_once(
    settings, db, tenant, caplog
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with _serving(settings, db, redis_url=dead, rate_limit_per_minute=1) as (_, c):
        with caplog.at_level(logging.WARNING, logger="keepmem.ratelimit"):
            codes = [
                (await c.get("/v1/notes", headers=tenant.headers)).status_code for _ in range(5)
            ]
    assert codes == [200] * 5  # fail open: a limit of 1 a minute is not enforced
    lines = [r for r in caplog.records if r.name == "keepmem.ratelimit"]
    assert len(lines) <= 1  # one line per period (it may have been said this minute)
