"""API keys cached per process for a few seconds (``app.caches.KeyCache``):
a revocation through the API ends the key at once in this process and in
every other (Redis carries a revocation epoch); what only the database knows
(a key revoked or a tenant disabled by hand) ends within the TTL, also with
Redis down. Only accepted keys are cached, by hash, at most a bounded number."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from app.auth.keys import hash_key
from app.caches import KeyCache
from app.cli.embedded import free_port
from app.db import Database
from app.main import create_app
from tests.conftest import ADMIN_TOKEN, SECRET, Tenant

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@contextlib.asynccontextmanager
async def _serving(
    settings, db: Database, ttl: float, **overrides: object
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An API process of its own (its own caches), sharing the database and Redis."""
    app = create_app(settings.model_copy(update={"key_cache_seconds": ttl, **overrides}), db=db)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield app, client


@pytest.fixture
async def owner(settings) -> AsyncIterator[Database]:
    database = Database(settings.owner_database_url or "")
    yield database
    await database.dispose()


async def _new_key(client: httpx.AsyncClient, tenant: Tenant, scopes=("read",), **extra) -> dict:
    r = await client.post(
        f"/v1/admin/tenants/{tenant.id}/keys",
        json={"name": "k", "scopes": list(scopes), **extra},
        headers=ADMIN,
    )
    assert r.status_code == 201, r.text
    return r.json()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _warm(c: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """Two requests: a new process caches its first keys before it has read
    the revocation epoch, so the second looks the key up once more (under
    the epoch now known); from the third on it comes from the cache."""
    for _ in range(2):
        assert (await c.get("/v1/notes", headers=headers)).status_code == 200


async def test_a_key_revoked_through_the_api_is_refused_on_the_next_request(
    settings, db, tenant
) -> None:
    # a TTL far longer than the test: only the revocation can end the key
    async with _serving(settings, db, ttl=600) as (app, c):
        made = await _new_key(c, tenant)
        for _ in range(3):
            assert (await c.get("/v1/notes", headers=_bearer(made["key"]))).status_code == 200
        assert app.state.caches.keys.get(hash_key(SECRET, made["key"]), 600) is not None
        r = await c.delete(f"/v1/keys/{made['id']}", headers=tenant.headers)
        assert r.status_code == 200
        r = await c.get("/v1/notes", headers=_bearer(made["key"]))
        assert r.status_code == 401 and "revoked" in r.json()["error"]


async def test_a_revocation_reaches_another_process_at_once(settings, db, tenant) -> None:
    async with (
        _serving(settings, db, ttl=600) as (_, first),
        _serving(settings, db, ttl=600) as (second_app, second),
    ):
        made = await _new_key(first, tenant)
        key = _bearer(made["key"])
        await _warm(second, key)
        assert (await second.get("/v1/notes", headers=key)).status_code == 200  # from its cache
        assert len(second_app.state.caches.keys) >= 1
        assert (await first.delete(f"/v1/keys/{made['id']}", headers=tenant.headers)).is_success
        r = await second.get("/v1/notes", headers=key)
        assert r.status_code == 401 and "revoked" in r.json()["error"]
        # the other keys of that process still work (looked up again)
        assert (await second.get("/v1/notes", headers=tenant.headers)).status_code == 200


async def test_a_narrowed_key_ends_with_its_parent_at_once(settings, db, tenant) -> None:
    async with (
        _serving(settings, db, ttl=600) as (_, first),
        _serving(settings, db, ttl=600) as (_, second),
    ):
        parent = await _new_key(first, tenant, scopes=("read", "write"))
        r = await second.post(
            "/v1/subkeys",
            headers=_bearer(parent["key"]),
            json={"name": "child", "scopes": ["read"], "expires_in_seconds": 600},
        )
        assert r.status_code == 201, r.text
        child = _bearer(r.json()["key"])
        assert (await second.get("/v1/notes", headers=child)).status_code == 200
        assert (await first.delete(f"/v1/keys/{parent['id']}", headers=tenant.headers)).is_success
        r = await second.get("/v1/notes", headers=child)
        assert r.status_code == 401 and "narrowed from" in r.json()["error"]


async def _revoke_in_database(owner: Database, key_id: str) -> None:
    """As another process, or an operator with psql, would: no Redis involved."""
    async with owner.transaction() as s:
        await s.execute(text("UPDATE api_keys SET revoked_at = now() WHERE id = :k"), {"k": key_id})


async def test_a_key_revoked_in_the_database_is_served_from_the_cache_until_the_ttl(
    settings, db, owner, tenant
) -> None:
    """The cache is really used: the database's word is not asked again."""
    async with _serving(settings, db, ttl=600) as (_, c):
        made = await _new_key(c, tenant)
        await _warm(c, _bearer(made["key"]))
        await _revoke_in_database(owner, made["id"])
        assert (await c.get("/v1/notes", headers=_bearer(made["key"]))).status_code == 200


async def _refused_after_the_ttl(c: httpx.AsyncClient, key: dict[str, str], ttl: float) -> dict:
    await asyncio.sleep(ttl + 0.2)
    r = await c.get("/v1/notes", headers=key)
    assert r.status_code == 401, r.text
    return r.json()


async def test_a_key_revoked_in_the_database_is_refused_within_the_ttl(
    settings, db, owner, tenant
) -> None:
    async with _serving(settings, db, ttl=1.0) as (_, c):
        made = await _new_key(c, tenant)
        await _warm(c, _bearer(made["key"]))
        await _revoke_in_database(owner, made["id"])
        refused = await _refused_after_the_ttl(c, _bearer(made["key"]), 1.0)
        assert "revoked" in refused["error"]


async def test_a_disabled_tenant_is_refused_within_the_ttl(settings, db, owner, tenant) -> None:
    async with _serving(settings, db, ttl=1.0) as (_, c):
        await _warm(c, tenant.headers)
        async with owner.transaction() as s:
            await s.execute(
                text("UPDATE tenants SET disabled_at = now() WHERE id = :t"), {"t": tenant.id}
            )
        refused = await _refused_after_the_ttl(c, tenant.headers, 1.0)
        assert refused["error"] == "tenant disabled"


async def test_with_redis_down_the_ttl_still_ends_a_revoked_key(settings, db, tenant) -> None:
    """A process that cannot reach Redis does not hear of the revocation: its
    cached key ends with the TTL (and its requests still pass, fail-open)."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with (
        _serving(settings, db, ttl=600) as (_, first),
        _serving(settings, db, ttl=1.0, redis_url=dead) as (_, cut_off),
    ):
        made = await _new_key(first, tenant)
        key = _bearer(made["key"])
        assert (await cut_off.get("/v1/notes", headers=key)).status_code == 200
        assert (await first.delete(f"/v1/keys/{made['id']}", headers=tenant.headers)).is_success
        refused = await _refused_after_the_ttl(cut_off, key, 1.0)
        assert "revoked" in refused["error"]


async def test_an_expiry_is_honoured_while_the_key_is_cached(settings, db, tenant) -> None:
    async with _serving(settings, db, ttl=600) as (_, c):
        expires = datetime.now(UTC) + timedelta(seconds=1.5)
        made = await _new_key(c, tenant, expires_at=expires.isoformat())
        assert (await c.get("/v1/notes", headers=_bearer(made["key"]))).status_code == 200
        await asyncio.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.2)
        r = await c.get("/v1/notes", headers=_bearer(made["key"]))
        assert r.status_code == 401 and "expired" in r.json()["error"]


async def test_cached_keys_keep_their_own_tenant_and_scopes(
    settings, db, tenant, other_tenant
) -> None:
    async with _serving(settings, db, ttl=600) as (app, c):
        reader = _bearer((await _new_key(c, tenant, scopes=("read",)))["key"])
        r = await c.post("/v1/notes", headers=tenant.headers, json={"id": "mine", "content": "a"})
        assert r.status_code == 200, r.text
        for _ in range(3):  # alternate, every one from the cache after the first
            for who, headers in ((tenant, tenant.headers), (other_tenant, other_tenant.headers)):
                me = (await c.get("/v1/whoami", headers=headers)).json()
                assert me["tenant_id"] == str(who.id)
                assert me["scopes"] == ["admin", "read", "write"]
            me = (await c.get("/v1/whoami", headers=reader)).json()
            assert me["tenant_id"] == str(tenant.id) and me["scopes"] == ["read"]
            refused = await c.post("/v1/notes", headers=reader, json={"content": "x"})
            assert refused.status_code == 403
            assert (await c.get("/v1/notes/mine", headers=reader)).status_code == 200
            assert (await c.get("/v1/notes/mine", headers=other_tenant.headers)).status_code == 404
        assert len(app.state.caches.keys) == 3


async def test_unknown_keys_are_never_cached(settings, db, tenant) -> None:
    async with _serving(settings, db, ttl=600) as (app, c):
        assert (await c.get("/v1/notes", headers=tenant.headers)).status_code == 200
        held = len(app.state.caches.keys)
        for i in range(30):
            r = await c.get("/v1/notes", headers=_bearer(f"km_guessing_{i:040d}"))
            assert r.status_code == 401
        assert len(app.state.caches.keys) == held == 1


async def test_usage_is_still_counted_for_cached_keys(settings, db, tenant) -> None:
    async with _serving(settings, db, ttl=600) as (app, c):
        made = await _new_key(c, tenant)
        for _ in range(4):
            assert (await c.get("/v1/notes", headers=_bearer(made["key"]))).status_code == 200
        day = time.strftime("%Y%m%d", time.gmtime())
        counted = await app.state.redis.get(f"keepmem:quota:requests:{tenant.id}:{day}")
        assert int(counted) >= 4
        keys = (await c.get("/v1/keys", headers=tenant.headers)).json()["keys"]
        used = next(k for k in keys if k["id"] == made["id"])
        assert used["last_used_at"] is not None


def test_the_cache_is_bounded() -> None:
    cache: KeyCache[str] = KeyCache(size=3)
    for i in range(10):
        cache.put(bytes([i]), f"key {i}", "epoch")
    assert len(cache) == 3
    assert cache.get(bytes([0]), 60) is None
    assert cache.get(bytes([9]), 60) == ("key 9", "epoch")
    assert cache.get(bytes([9]), 0) is None  # a TTL of 0 is no cache


async def test_a_ttl_of_zero_caches_nothing(settings, db, tenant) -> None:
    async with _serving(settings, db, ttl=0) as (app, c):
        assert (await c.get("/v1/notes", headers=tenant.headers)).status_code == 200
        assert len(app.state.caches.keys) == 0
