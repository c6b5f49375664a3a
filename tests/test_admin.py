"""Operator API: tenants and keys, guarded by the admin token."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
async def test_admin_routes_need_the_admin_token(client, headers, tenant) -> None:
    for method, url in [
        ("GET", "/v1/admin/tenants"),
        ("POST", "/v1/admin/tenants"),
        ("GET", f"/v1/admin/tenants/{tenant.id}/keys"),
    ]:
        r = await client.request(method, url, json={"name": "x"}, headers=headers)
        assert r.status_code == 401, url


async def test_tenant_key_is_not_an_admin_credential(client, tenant) -> None:
    r = await client.get("/v1/admin/tenants", headers=tenant.headers)
    assert r.status_code == 401


async def test_create_tenant_returns_a_working_key_once(client) -> None:
    name = f"acme-{uuid.uuid4().hex[:6]}"
    r = await client.post("/v1/admin/tenants", json={"name": name}, headers=ADMIN)
    assert r.status_code == 201, r.text
    body = r.json()
    key = body["api_key"]["key"]
    assert key.startswith("km_") and sorted(body["api_key"]["scopes"]) == ["admin", "read", "write"]
    headers = {"Authorization": f"Bearer {key}"}
    assert (
        await client.post("/v1/notes", json={"content": "hi"}, headers=headers)
    ).status_code == 200
    listed = (
        await client.get(f"/v1/admin/tenants/{body['tenant']['id']}/keys", headers=ADMIN)
    ).json()
    assert all("key" not in k for k in listed["keys"])
    names = [
        t["name"] for t in (await client.get("/v1/admin/tenants", headers=ADMIN)).json()["tenants"]
    ]
    assert name in names
    r = await client.post("/v1/admin/tenants", json={"name": name}, headers=ADMIN)
    assert r.status_code == 409


async def test_admin_creates_and_revokes_keys(client, tenant) -> None:
    r = await client.post(
        f"/v1/admin/tenants/{tenant.id}/keys",
        json={"name": "reader", "scopes": ["read"]},
        headers=ADMIN,
    )
    assert r.status_code == 201
    key_id = r.json()["id"]
    r = await client.delete(f"/v1/admin/tenants/{tenant.id}/keys/{key_id}", headers=ADMIN)
    assert r.status_code == 200 and r.json()["revoked_at"]
    r = await client.delete(f"/v1/admin/tenants/{uuid.uuid4()}/keys/{key_id}", headers=ADMIN)
    assert r.status_code == 404
    r = await client.get(f"/v1/admin/tenants/{uuid.uuid4()}/keys", headers=ADMIN)
    assert r.status_code == 404


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "x" * 300}])
async def test_create_tenant_rejects_bad_names(client, body) -> None:
    r = await client.post("/v1/admin/tenants", json=body, headers=ADMIN)
    assert r.status_code in (400, 422)
    assert r.json()["error"]


async def test_expiry_in_the_past_is_rejected(client, tenant) -> None:
    r = await client.post(
        f"/v1/admin/tenants/{tenant.id}/keys",
        json={"name": "old", "expires_at": "2001-01-01T00:00:00Z"},
        headers=ADMIN,
    )
    assert r.status_code == 400
