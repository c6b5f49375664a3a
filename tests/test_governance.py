"""Quotas and usage, retention (a note's expiry, a project's retention) and
erasure (a project, a whole tenant: proven by scanning every table)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.pipeline import dispatcher
from tests.conftest import ADMIN_TOKEN
from tests.test_pipeline import run_job

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _quotas(client, tenant, **quotas) -> dict:
    r = await client.put(f"/v1/admin/tenants/{tenant.id}/quotas", headers=ADMIN, json=quotas)
    assert r.status_code == 200, r.text
    return r.json()


async def _put(client, tenant, note_id: str, content: str = "x", **extra):
    return await client.post(
        "/v1/notes", headers=tenant.headers, json={"id": note_id, "content": content, **extra}
    )


async def test_note_quota_refuses_the_next_note_and_writes_nothing(client, tenant) -> None:
    await _quotas(client, tenant, notes=3)
    before = (await client.get("/v1/usage", headers=tenant.headers)).json()["notes"]
    for i in range(3 - before):
        assert (await _put(client, tenant, f"q{i}")).status_code == 200
    r = await _put(client, tenant, "one-too-many")
    assert r.status_code == 403 and r.json()["code"] == "quota_exceeded"
    assert "notes" in r.json()["error"] and "limit 3" in r.json()["error"]
    assert (await client.get("/v1/notes/one-too-many", headers=tenant.headers)).status_code == 404
    # a batch past the quota writes none of its notes
    batch = await client.post(
        "/v1/notes/batch",
        headers=tenant.headers,
        json={"notes": [{"id": f"b{i}", "content": "y"} for i in range(3)]},
    )
    assert batch.status_code == 403
    assert (await client.get("/v1/notes/b0", headers=tenant.headers)).status_code == 404
    # changing a note that exists is not a new note
    changed = await _put(client, tenant, "q0", "changed")
    assert changed.status_code == 200, changed.text
    usage = (await client.get("/v1/usage", headers=tenant.headers)).json()
    assert usage["notes"] == 3 and usage["quotas"]["notes"] == 3
    refused = await client.get(
        "/v1/audit", headers=tenant.headers, params={"outcome": "error", "limit": 5}
    )
    assert any(e["outcome"] == "error:quota_exceeded" for e in refused.json()["entries"])
    # raising the quota lets writes through again
    await _quotas(client, tenant, notes=None)
    again = await _put(client, tenant, "one-too-many")
    assert again.status_code == 200, again.text


async def test_byte_quota(client, tenant) -> None:
    await _quotas(client, tenant, bytes=2_000)
    assert (await _put(client, tenant, "small", "short", summary="short")).status_code == 200
    r = await _put(client, tenant, "big", "z" * 5000, summary="z" * 3000)
    assert r.status_code == 403 and "bytes" in r.json()["error"]
    usage = (await client.get("/v1/usage", headers=tenant.headers)).json()
    assert 0 < usage["bytes"] <= 2_000


async def test_daily_quotas(client, tenant, make_tenant) -> None:
    await _quotas(client, tenant, requests_per_day=3)
    codes = [(await client.get("/v1/notes", headers=tenant.headers)).status_code for _ in range(5)]
    assert codes[:2] == [200, 200] and codes[-1] == 429
    r = await client.get("/v1/notes", headers=tenant.headers)
    assert r.json()["code"] == "quota_exceeded" and "requests_per_day" in r.json()["error"]
    assert int(r.headers["retry-after"]) > 0
    other = await make_tenant()
    await _quotas(client, other, jobs_per_day=1)
    assert (await _put(client, other, "first")).status_code == 200  # queues its jobs
    r = await _put(client, other, "second")
    assert r.status_code == 429 and "jobs_per_day" in r.json()["error"]
    usage = await client.get(f"/v1/admin/tenants/{other.id}/usage", headers=ADMIN)
    assert usage.json()["jobs_today"] >= 1 and usage.json()["requests_today"] >= 2


async def test_quota_put_changes_only_what_it_names(client, tenant) -> None:
    """Left out: unchanged; null: unlimited; 0: nothing allowed; a number:
    that limit. (A PUT used to clear every quota it left out, and README
    said 0 cleared one while the code set a zero quota.)"""
    set_all = {"notes": 100, "bytes": 10**6, "requests_per_day": 10**5, "jobs_per_day": 10**4}
    assert (await _quotas(client, tenant, **set_all))["quotas"] == set_all
    # left out: unchanged
    got = await _quotas(client, tenant, notes=50)
    assert got["quotas"] == {**set_all, "notes": 50}
    assert (await _quotas(client, tenant))["quotas"] == {**set_all, "notes": 50}
    # null: unlimited
    got = await _quotas(client, tenant, bytes=None)
    assert got["quotas"] == {**set_all, "notes": 50, "bytes": None}
    # 0: nothing allowed (a real zero, not "unlimited")
    got = await _quotas(client, tenant, notes=0)
    assert got["quotas"]["notes"] == 0 and got["quotas"]["requests_per_day"] == 10**5
    r = await _put(client, tenant, "none-allowed")
    assert r.status_code == 403 and "notes" in r.json()["error"]
    # a positive number again lets writes through
    await _quotas(client, tenant, notes=10**6)
    assert (await _put(client, tenant, "allowed-again")).status_code == 200
    # a name that is no quota is refused, and changes nothing
    r = await client.put(
        f"/v1/admin/tenants/{tenant.id}/quotas", headers=ADMIN, json={"note": 1, "bytes": 5}
    )
    assert r.status_code == 422 and r.json()["code"] == "invalid"
    usage = (await client.get(f"/v1/admin/tenants/{tenant.id}/usage", headers=ADMIN)).json()
    assert usage["quotas"]["bytes"] is None
    # an empty body for a tenant that does not exist is still a 404
    r = await client.put(f"/v1/admin/tenants/{uuid.uuid4()}/quotas", headers=ADMIN, json={})
    assert r.status_code == 404


async def test_usage_needs_an_admin_credential(client, tenant) -> None:
    reader = await client.post(
        "/v1/keys", headers=tenant.headers, json={"name": "r", "scopes": ["read"]}
    )
    r = await client.get("/v1/usage", headers={"Authorization": f"Bearer {reader.json()['key']}"})
    assert r.status_code == 403


async def test_expiry_and_retention_are_swept(client, tenant, make_pipeline, db) -> None:
    assert (await _put(client, tenant, "fleeting", ttl_seconds=1)).status_code == 200
    assert (await _put(client, tenant, "lasting", ttl_seconds=3600)).status_code == 200
    assert (await _put(client, tenant, "old")).status_code == 200
    r = await _put(client, tenant, "bad", expires_at="2030-01-01T00:00:00", ttl_seconds=5)
    assert r.status_code == 400
    r = await client.put("/v1/retention", headers=tenant.headers, json={"days": 30})
    assert r.status_code == 200 and r.json() == {"days": 30}
    async with tenancy.tenant_id_transaction(
        db, tenant.id
    ) as session:  # "old" was last touched long ago
        await session.execute(
            text("UPDATE notes SET updated_at = now() - interval '40 days' WHERE id = 'old'")
        )
    await asyncio.sleep(1.2)
    pipeline = make_pipeline()
    await dispatcher.reconcile(pipeline, limit=100_000)
    jobs = await client.get(
        "/v1/jobs", headers=tenant.headers, params={"kind": "expire", "status": "pending"}
    )
    expire = [j for j in jobs.json()["jobs"] if j["kind"] == "expire"]
    assert len(expire) == 1
    await run_job(pipeline, tenant, expire[0]["id"])
    for note_id, status in (("fleeting", 404), ("old", 404), ("lasting", 200)):
        r = await client.get(f"/v1/notes/{note_id}", headers=tenant.headers)
        assert r.status_code == status, note_id
    feed = await client.get("/v1/export/changes", headers=tenant.headers)
    deleted = {c["entity_id"] for c in feed.json()["events"] if c["mutation"] == "doc_delete"}
    assert {"fleeting", "old"} <= deleted


async def _rows_of(owner: Database, column: str, value: uuid.UUID) -> dict[str, int]:
    """Every table with ``column``, and how many rows hold ``value`` there
    (as the schema owner: row-level security does not hide anything)."""
    found: dict[str, int] = {}
    async with owner.transaction() as session:
        tables = await session.scalars(
            text(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND column_name = :c AND data_type = 'uuid'"
            ),
            {"c": column},
        )
        for table in list(tables):
            n = await session.scalar(
                text(f'SELECT count(*) FROM "{table}" WHERE {column} = :v'), {"v": value}
            )
            if n:
                found[table] = int(n)
    return found


@pytest.fixture
async def owner(settings):
    database = Database(settings.owner_database_url or "")
    yield database
    await database.dispose()


async def _fill(client, tenant, make_pipeline, project: str) -> None:
    """Notes with versions, parts, vectors, entities, edges, jobs and feed,
    a service account with a token, a narrowed key, audit entries."""
    h = tenant.project(project)
    for i in range(3):
        await client.post("/v1/notes", headers=h, json={
            "id": f"n{i}", "content": f"Maria Lopez met Tom Baker in Porto, day {i}.",
            "tags": {"references": "n0"},
        })  # fmt: skip
    await client.post("/v1/notes", headers=h, json={"id": "n1", "content": "Changed later."})
    long = "\n\n".join(
        f"# Chapter {c}\n\n" + " ".join(f"Maria walked to market {c}.{i}." for i in range(80))
        for c in range(3)
    )
    r = await client.post(
        "/v1/notes", headers=h, json={"id": "book", "content": long, "analyze": True}
    )
    assert r.status_code == 200, r.text
    pipeline = make_pipeline()
    for _ in range(3):
        pending = await client.get("/v1/jobs", headers=h, params={"status": "pending"})
        for job in reversed(pending.json()["jobs"]):
            await run_job(pipeline, tenant, job["id"])
    svc = await client.post(
        "/v1/oauth/clients", headers=h, json={"name": "svc", "project": project}
    )
    assert svc.status_code == 201, svc.text
    token = await client.post(
        "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(svc.json()["client_id"], svc.json()["client_secret"]),
        headers={"Host": "127.0.0.1"},
    )
    assert token.status_code == 200, token.text
    sub = await client.post("/v1/subkeys", headers=h, json={"name": "s", "expires_in_seconds": 600})
    assert sub.status_code == 201


async def test_erasing_a_tenant_leaves_one_audit_entry(client, make_tenant, make_pipeline, owner):
    doomed, survivor = await make_tenant(), await make_tenant()
    await _fill(client, doomed, make_pipeline, "default")
    await _fill(client, doomed, make_pipeline, "second")
    await _fill(client, survivor, make_pipeline, "default")
    held = await _rows_of(owner, "tenant_id", doomed.id)
    for table in ("notes", "note_versions", "parts", "embeddings", "edges", "entities",
                  "mentions", "jobs", "changes", "audit_log", "api_keys", "oauth_clients",
                  "oauth_grants", "usage_counters"):  # fmt: skip
        assert held.get(table), f"the test put nothing in {table}: {held}"
    r = await client.delete(f"/v1/admin/tenants/{doomed.id}", headers=ADMIN)
    assert r.status_code == 204
    assert await _rows_of(owner, "tenant_id", doomed.id) == {"audit_log": 1}
    async with owner.transaction() as session:
        assert not await session.scalar(
            text("SELECT count(*) FROM tenants WHERE id = :t"), {"t": doomed.id}
        )
        entry = (
            await session.execute(
                text("SELECT action, detail::text FROM audit_log WHERE tenant_id = :t"),
                {"t": doomed.id},
            )
        ).one()
    assert entry.action == "tenant.erase" and "Maria" not in entry.detail
    assert (await client.get("/v1/notes", headers=doomed.headers)).status_code == 401
    # the other tenant is untouched
    assert await _rows_of(owner, "tenant_id", survivor.id) != {}
    assert (await client.get("/v1/notes/n0", headers=survivor.headers)).status_code == 200


async def test_erasing_a_project(client, tenant, make_pipeline, owner) -> None:
    await _fill(client, tenant, make_pipeline, "gone")
    await _fill(client, tenant, make_pipeline, "kept")
    projects = await _rows_of(owner, "tenant_id", tenant.id)
    assert projects["notes"] >= 6
    async with owner.transaction() as session:
        gone_id = await session.scalar(
            text("SELECT id FROM projects WHERE tenant_id = :t AND slug = 'gone'"), {"t": tenant.id}
        )
    sub = await client.post(
        "/v1/subkeys", headers=tenant.project("gone"), json={"name": "s", "expires_in_seconds": 60}
    )
    r = await client.delete("/v1/projects/gone", headers=tenant.headers)
    assert r.status_code == 204
    left = await _rows_of(owner, "project_id", gone_id)
    assert left == {"audit_log": 1}, left
    locked = {"Authorization": f"Bearer {sub.json()['key']}"}
    assert (await client.get("/v1/notes", headers=locked)).status_code == 401
    kept = await client.get("/v1/notes/n0", headers=tenant.project("kept"))
    assert kept.status_code == 200
    assert (await client.delete("/v1/projects/gone", headers=tenant.headers)).status_code == 404
