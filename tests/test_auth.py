"""401 / 403 / cross-tenant and cross-project 404 on every notes route."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, Tenant

ROUTES = [
    ("POST", "/v1/notes", {"content": "x", "id": "secret"}),
    ("GET", "/v1/notes", None),
    ("GET", "/v1/notes/secret", None),
    ("PATCH", "/v1/notes/secret/tags", {"set": {"a": "b"}}),
    ("DELETE", "/v1/notes/secret", None),
    ("GET", "/v1/notes/secret/versions", None),
    ("GET", "/v1/notes/secret/parts", None),
    ("POST", "/v1/move", {"name": "elsewhere", "source": "secret"}),
    ("GET", "/v1/keys", None),
    ("POST", "/v1/keys", {"name": "x"}),
    ("DELETE", "/v1/keys/00000000-0000-0000-0000-000000000000", None),
]


async def call(client: httpx.AsyncClient, method: str, url: str, body, headers) -> httpx.Response:
    return await client.request(method, url, json=body, headers=headers)


@pytest.mark.parametrize("method, url, body", ROUTES)
async def test_missing_key_is_401(client, method, url, body) -> None:
    r = await call(client, method, url, body, {})
    assert r.status_code == 401
    assert r.json()["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("method, url, body", ROUTES)
async def test_bad_key_is_401(client, method, url, body) -> None:
    for header in (
        "Bearer km_nope_nope",
        "Basic abc",
        "Bearer ",
        "Bearer \u00e9t\u00e9".encode("utf-8"),
    ):
        r = await call(client, method, url, body, {"Authorization": header})
        assert r.status_code == 401, header


@pytest.mark.parametrize(
    "method, url, body",
    [
        r
        for r in ROUTES
        if (not r[1].startswith("/v1/keys") and r[0] != "POST") or r[1] == "/v1/move"
    ],
)
async def test_other_tenant_gets_404(
    client, tenant: Tenant, other_tenant: Tenant, method, url, body
) -> None:
    r = await client.post(
        "/v1/notes", json={"content": "mine", "id": "secret"}, headers=tenant.headers
    )
    assert r.status_code == 200
    r = await call(client, method, url, body, other_tenant.headers)
    if url == "/v1/notes":
        assert r.status_code == 200 and r.json()["count"] == 0
    else:
        assert r.status_code == 404, r.text
        assert r.json()["code"] == "note_not_found"  # its own code per error
    # and the owner still has it, untouched
    r = await client.get("/v1/notes/secret", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["summary"] == "mine"


async def test_other_tenant_put_same_id_makes_its_own_note(client, tenant, other_tenant) -> None:
    await client.post("/v1/notes", json={"content": "A's", "id": "shared"}, headers=tenant.headers)
    await client.post(
        "/v1/notes", json={"content": "B's", "id": "shared"}, headers=other_tenant.headers
    )
    a = (await client.get("/v1/notes/shared", headers=tenant.headers)).json()
    b = (await client.get("/v1/notes/shared", headers=other_tenant.headers)).json()
    assert (a["summary"], b["summary"]) == ("A's", "B's")
    versions = (await client.get("/v1/notes/shared/versions", headers=tenant.headers)).json()
    assert versions["count"] == 0


async def test_projects_are_isolated(client, tenant) -> None:
    r = await client.post(
        "/v1/notes", json={"content": "in alpha", "id": "p"}, headers=tenant.project("alpha")
    )
    assert r.status_code == 200
    assert (await client.get("/v1/notes/p", headers=tenant.project("beta"))).status_code == 404
    assert (await client.get("/v1/notes/p", headers=tenant.headers)).status_code == 404
    assert (await client.get("/v1/notes/p", headers=tenant.project("alpha"))).status_code == 200
    # a new project is seeded with system notes
    r = await client.get("/v1/notes", params={"prefix": ".now"}, headers=tenant.project("beta"))
    assert r.json()["count"] == 1


@pytest.mark.parametrize("slug", ["A", "x", "-ab", "ab-", "a_b", "a" * 64, "1ab"])
async def test_invalid_project_slug_is_400(client, tenant, slug) -> None:
    r = await client.get("/v1/notes", headers=tenant.project(slug))
    assert r.status_code == 400
    assert "slug" in r.json()["error"]


async def _admin_key(client, tenant: Tenant, scopes: list[str], **extra) -> httpx.Response:
    return await client.post(
        f"/v1/admin/tenants/{tenant.id}/keys",
        json={"name": "k", "scopes": scopes, **extra},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )


async def test_read_only_key_cannot_write(client, tenant) -> None:
    key = (await _admin_key(client, tenant, ["read"])).json()["key"]
    headers = {"Authorization": f"Bearer {key}"}
    r = await client.post("/v1/notes", json={"content": "x"}, headers=headers)
    assert r.status_code == 403 and r.json()["code"] == "missing_scope"
    assert (await client.get("/v1/notes", headers=headers)).status_code == 200
    assert (await client.get("/v1/keys", headers=headers)).status_code == 403


async def test_write_only_key_cannot_read(client, tenant) -> None:
    key = (await _admin_key(client, tenant, ["write"])).json()["key"]
    headers = {"Authorization": f"Bearer {key}"}
    assert (
        await client.post("/v1/notes", json={"content": "x"}, headers=headers)
    ).status_code == 200
    assert (await client.get("/v1/notes", headers=headers)).status_code == 403


async def test_revoked_key_is_401(client, tenant) -> None:
    created = (await _admin_key(client, tenant, ["read", "write"])).json()
    headers = {"Authorization": f"Bearer {created['key']}"}
    assert (await client.get("/v1/notes", headers=headers)).status_code == 200
    r = await client.delete(f"/v1/keys/{created['id']}", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["revoked_at"]
    r = await client.get("/v1/notes", headers=headers)
    assert r.status_code == 401 and "revoked" in r.json()["error"]


async def test_expired_key_is_401(client, tenant, db) -> None:
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    created = (await _admin_key(client, tenant, ["read"], expires_at=soon)).json()
    import asyncio

    await asyncio.sleep(1.2)
    r = await client.get("/v1/notes", headers={"Authorization": f"Bearer {created['key']}"})
    assert r.status_code == 401 and "expired" in r.json()["error"]


async def test_key_last_used_is_recorded(client, tenant) -> None:
    await client.get("/v1/notes", headers=tenant.headers)
    keys = (await client.get("/v1/keys", headers=tenant.headers)).json()["keys"]
    assert keys[0]["last_used_at"] is not None
    assert "key" not in keys[0]  # secrets are never listed


async def test_tenant_admin_manages_only_its_keys(client, tenant, other_tenant) -> None:
    r = await client.post(
        "/v1/keys", json={"name": "ci", "scopes": ["read"]}, headers=tenant.headers
    )
    assert r.status_code == 201 and r.json()["key"].startswith(r.json()["prefix"] + "_")
    other_keys = (await client.get("/v1/keys", headers=other_tenant.headers)).json()["keys"]
    r = await client.delete(f"/v1/keys/{other_keys[0]['id']}", headers=tenant.headers)
    assert r.status_code == 404
    r = await client.post(
        "/v1/keys", json={"name": "x", "scopes": ["root"]}, headers=tenant.headers
    )
    assert r.status_code == 422  # the schema lists the scopes


async def test_ids_in_paths_are_percent_decoded(client, tenant) -> None:
    note_id = "%32142b0dd147"
    await client.post("/v1/notes", json={"content": "c", "id": note_id}, headers=tenant.headers)
    r = await client.get("/v1/notes/" + quote(note_id, safe=""), headers=tenant.headers)
    assert r.status_code == 200 and r.json()["id"] == note_id


async def test_refused_key_on_health_sees_no_count(client, tenant) -> None:
    created = (await _admin_key(client, tenant, ["read"])).json()
    await client.post("/v1/notes", json={"content": "x"}, headers=tenant.headers)
    await client.delete(f"/v1/keys/{created['id']}", headers=tenant.headers)
    r = await client.get("/v1/health", headers={"Authorization": f"Bearer {created['key']}"})
    assert r.status_code == 200 and r.json()["item_count"] is None
    assert (await client.get("/v1/health", headers=tenant.headers)).json()["item_count"] == 1


async def test_whoami_and_projects_show_what_a_credential_may_do(
    client, tenant, other_tenant
) -> None:
    me = (await client.get("/v1/whoami", headers=tenant.headers)).json()
    assert me["tenant_id"] == str(tenant.id) and me["project"] == "default"
    assert me["scopes"] == ["admin", "read", "write"] and me["project_locked"] is False
    assert me["credential"] == f"key:{me['key_id']}" and me["tags"] == {}
    await client.get("/v1/notes", headers=tenant.project("side-one"))  # made on first use
    await client.get("/v1/notes", headers=other_tenant.project("theirs"))
    listed = (await client.get("/v1/projects", headers=tenant.headers)).json()["projects"]
    assert [p["slug"] for p in listed] == ["default", "side-one"]
    # a narrowed key: one project, a tag scope, read only; it lists that project only
    sub = await client.post(
        "/v1/subkeys",
        headers=tenant.project("side-one"),
        json={"name": "agent", "scopes": ["read"], "tags": {"team": "a"}, "expires_in_seconds": 60},
    )
    assert sub.status_code == 201, sub.text
    narrow = {"Authorization": f"Bearer {sub.json()['key']}"}
    me = (await client.get("/v1/whoami", headers=narrow)).json()
    assert me["project"] == "side-one" and me["project_locked"] is True
    assert me["scopes"] == ["read"] and me["tags"] == {"team": "a"} and me["expires_at"]
    listed = (await client.get("/v1/projects", headers=narrow)).json()["projects"]
    assert [p["slug"] for p in listed] == ["side-one"]
    assert (await client.get("/v1/whoami")).status_code == 401
    assert (await client.get("/v1/projects")).status_code == 401
