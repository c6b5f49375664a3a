"""Rate limits on real Redis: token buckets per key (429 with Retry-After and
X-RateLimit-* headers, no burst across a window edge, other keys unaffected)
and per client address for failed authentications."""

from __future__ import annotations

import asyncio

import httpx

from app.main import create_app


def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_over_the_limit_is_429_per_key(settings, db, make_tenant) -> None:
    limited = settings.model_copy(update={"rate_limit_per_minute": 3})
    app = create_app(limited, db=db)
    a, b = await make_tenant(), await make_tenant()
    async with app.router.lifespan_context(app), _client(app) as c:
        first = await c.get("/v1/notes", headers=a.headers)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit"] == "3"
        assert first.headers["x-ratelimit-remaining"] == "2"
        assert 1 <= int(first.headers["x-ratelimit-reset"]) <= 60
        codes = [(await c.get("/v1/notes", headers=a.headers)).status_code for _ in range(7)]
        # a bucket of 3: two more pass, then the refill (one per 20 s) lets nothing through
        assert codes == [200, 200, 429, 429, 429, 429, 429]
        r = await c.get("/v1/notes", headers=a.headers)
        assert r.status_code == 429 and r.json()["code"] == "rate_limited"
        assert 1 <= int(r.headers["retry-after"]) <= 20
        assert r.headers["x-ratelimit-remaining"] == "0"
        assert (await c.get("/v1/notes", headers=b.headers)).status_code == 200


async def test_bucket_refills_continuously(settings, db, make_tenant) -> None:
    """At 600/min a token comes back every 0.1 s: no fixed window to wait out."""
    limited = settings.model_copy(update={"rate_limit_per_minute": 600})
    app = create_app(limited, db=db)
    t = await make_tenant()
    redis = None
    async with app.router.lifespan_context(app), _client(app) as c:
        redis = app.state.redis
        # drain the bucket directly, as 600 requests would
        await redis.hset(f"keepmem:rl:key:{await _key_id(c, t)}", mapping={"t": 0, "u": _now()})
        assert (await c.get("/v1/notes", headers=t.headers)).status_code == 429
        await asyncio.sleep(0.35)
        assert (await c.get("/v1/notes", headers=t.headers)).status_code == 200


async def _key_id(c: httpx.AsyncClient, t) -> str:
    r = await c.get("/v1/keys", headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()["keys"][0]["id"]


def _now() -> float:
    import time

    return time.time()


async def test_failed_authentication_is_limited_per_address(settings, db, tenant) -> None:
    limited = settings.model_copy(update={"auth_failures_per_minute": 5})
    app = create_app(limited, db=db)
    async with app.router.lifespan_context(app), _client(app) as c:
        await app.state.redis.delete("keepmem:rl:auth:127.0.0.1")
        bad = {"Authorization": "Bearer km_aaaaaaaa_" + "x" * 30}
        codes = [(await c.get("/v1/notes", headers=bad)).status_code for _ in range(8)]
        assert codes[:5] == [401] * 5 and codes[5:] == [429] * 3
        r = await c.get("/v1/notes", headers=bad)
        assert r.json()["code"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
        # a good key from the same address (a NAT, a proxy) is not locked out,
        # and successful requests never touch the address's bucket
        assert (await c.get("/v1/notes", headers=tenant.headers)).status_code == 200
        state = await app.state.redis.hgetall("keepmem:rl:auth:127.0.0.1")
        assert float(state[b"t"]) < 1
