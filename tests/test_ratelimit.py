"""Rate limits on real Redis: token buckets per key (429 with Retry-After and
X-RateLimit-* headers, no burst across a window edge, other keys unaffected)
and per client address for failed authentications."""

from __future__ import annotations

import asyncio

import httpx
import pydantic
import pytest

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


BAD_KEY = {"Authorization": "Bearer km_aaaaaaaa_" + "x" * 30}


def _bad_logins(url: str, forwarded: list[str], path: str = "/v1/notes") -> list[int]:
    codes = []
    with httpx.Client(base_url=url, timeout=30) as c:
        for address in forwarded:
            headers = {**BAD_KEY, "X-Forwarded-For": address, "Accept": "application/json"}
            if path == "/mcp":
                codes.append(c.post(path, json={}, headers=headers).status_code)
            else:
                codes.append(c.get(path, headers=headers).status_code)
    return codes


def test_forwarded_addresses_count_only_from_trusted_proxies(settings) -> None:
    """Served as `keepmem serve` serves (uvicorn, server_config): a peer that
    is no configured proxy cannot give each bad key a new address
    (X-Forwarded-For is ignored, its own address runs out of tries); a
    configured proxy's X-Forwarded-For is the client's address."""
    import redis as sync_redis

    from tests.conftest import serving

    store = sync_redis.Redis.from_url(settings.redis_url)
    peer = "keepmem:rl:auth:127.0.0.1"
    limited = settings.model_copy(update={"auth_failures_per_minute": 30})
    try:
        store.delete(peer)
        with serving(create_app(limited)) as url:
            codes = _bad_logins(url, [f"203.0.113.{i}" for i in range(60)])
            assert codes[:30] == [401] * 30 and codes[30:] == [429] * 30
            # /mcp counts its failed authentications too, against the same address
            assert _bad_logins(url, ["203.0.113.99"], "/mcp") == [429]
            store.delete(peer)
            r = httpx.post(f"{url}/mcp", json={}, headers={"X-Forwarded-Proto": "https", **BAD_KEY})
            assert 'resource_metadata="http://' in r.headers["www-authenticate"]
        store.delete(peer)
        trusting = limited.model_copy(update={"trusted_proxies": ["127.0.0.1"]})
        with serving(create_app(trusting)) as url:
            clients = [f"198.51.100.{i}" for i in range(60)]
            store.delete(*(f"keepmem:rl:auth:{a}" for a in [*clients, "192.0.2.7"]))
            assert _bad_logins(url, clients) == [401] * 60  # sixty clients, one try each
            assert _bad_logins(url, ["192.0.2.7"] * 31)[-1] == 429  # one client, out of tries
            assert not store.exists(peer)  # the proxy itself is never counted
            # the forwarded scheme is believed too (the URLs the app makes)
            r = httpx.post(f"{url}/mcp", json={}, headers={"X-Forwarded-Proto": "https", **BAD_KEY})
            assert 'resource_metadata="https://' in r.headers["www-authenticate"]
    finally:
        store.delete(peer, "keepmem:rl:auth:192.0.2.7")
        store.close()


def test_trusted_proxies_setting_reads_a_list_or_commas(monkeypatch) -> None:
    from app.settings import Settings

    assert Settings().trusted_proxies == []
    monkeypatch.setenv("KEEPMEM_TRUSTED_PROXIES", "10.0.0.1, 10.2.0.0/16")
    assert Settings().trusted_proxies == ["10.0.0.1", "10.2.0.0/16"]
    monkeypatch.setenv("KEEPMEM_TRUSTED_PROXIES", '["::1"]')
    assert Settings().trusted_proxies == ["::1"]
    monkeypatch.setenv("KEEPMEM_TRUSTED_PROXIES", "not-an-address")
    with pytest.raises(pydantic.ValidationError, match="not-an-address"):
        Settings()
