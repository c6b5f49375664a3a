"""CORS: the origins a project allows (``cors_origins``) may call the API from
a browser; every other origin is refused before anything is done, and
credentials in CORS's sense are never allowed. (tests/test_cors_browser.py
does the same from a real browser.)"""

from __future__ import annotations

import uuid

import httpx

from tests.conftest import Tenant

APP = "https://app.example"
OTHER = "https://elsewhere.example"


def _preflight(origin: str, headers: str = "authorization, content-type, x-project") -> dict:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": headers,
    }


async def _allow(client: httpx.AsyncClient, tenant: Tenant, origins: list[str] | None) -> dict:
    r = await client.patch("/v1/settings", json={"cors_origins": origins}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def _note(client: httpx.AsyncClient, tenant: Tenant, note_id: str) -> int:
    r = await client.get(f"/v1/notes/{note_id}", headers=tenant.headers)
    return r.status_code


async def test_no_origin_is_allowed_until_a_project_names_it(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert (await client.get("/v1/settings", headers=tenant.headers)).json()["cors_origins"] == []
    origin = f"https://{uuid.uuid4().hex[:10]}.example"
    r = await client.options("/v1/notes", headers=_preflight(origin))
    assert r.status_code == 403
    assert r.json()["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in r.headers

    # The request itself (a browser would not send it): refused, nothing stored.
    note_id = f"cors-{uuid.uuid4().hex[:8]}"
    r = await client.post(
        "/v1/notes",
        json={"id": note_id, "content": "x"},
        headers={**tenant.headers, "Origin": origin},
    )
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "origin_not_allowed"
    assert "PATCH /v1/settings" in r.json()["error"]
    assert "access-control-allow-origin" not in r.headers
    assert await _note(client, tenant, note_id) == 404


async def test_an_allowed_origin_is_answered_with_its_headers(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    shown = await _allow(client, tenant, ["HTTPS://App.Example:443", APP, "http://localhost:5173"])
    assert shown["cors_origins"] == [APP, "http://localhost:5173"]  # normalised, said once

    r = await client.options("/v1/notes", headers=_preflight(APP))
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == APP
    assert "PUT" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == "authorization, content-type, x-project"
    assert "access-control-allow-credentials" not in r.headers
    assert "Origin" in r.headers["vary"]

    note_id = f"cors-{uuid.uuid4().hex[:8]}"
    r = await client.post(
        "/v1/notes",
        json={"id": note_id, "content": "from a page"},
        headers={**tenant.headers, "Origin": APP},
    )
    assert r.status_code in (200, 201), r.text
    assert r.headers["access-control-allow-origin"] == APP
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
    assert "access-control-allow-credentials" not in r.headers
    assert "Origin" in r.headers["vary"]
    assert await _note(client, tenant, note_id) == 200

    # An error of an allowed origin is readable by the page (its reason)...
    r = await client.get("/v1/notes/x", headers={"Origin": APP, "Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert r.headers["access-control-allow-origin"] == APP
    # ...and another origin stays refused.
    r = await client.get("/v1/settings", headers={**tenant.headers, "Origin": OTHER})
    assert r.status_code == 403
    assert "access-control-allow-origin" not in r.headers


async def test_one_projects_origin_is_not_anothers(
    client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
) -> None:
    origin = f"https://{uuid.uuid4().hex[:10]}.example"
    await _allow(client, tenant, [origin])
    # The preflight names no project: some project allows the origin.
    assert (await client.options("/v1/notes", headers=_preflight(origin))).status_code == 204
    # The request itself carries the other tenant's key: refused, nothing done.
    note_id = f"cors-{uuid.uuid4().hex[:8]}"
    r = await client.post(
        "/v1/notes",
        json={"id": note_id, "content": "x"},
        headers={**other_tenant.headers, "Origin": origin},
    )
    assert r.status_code == 403
    assert r.json()["code"] == "origin_not_allowed"
    assert await _note(client, other_tenant, note_id) == 404
    # Another project of the same tenant does not inherit the list either.
    r = await client.get("/v1/settings", headers={**tenant.project("side"), "Origin": origin})
    assert r.status_code == 403


async def test_any_origin_and_back_to_none(client: httpx.AsyncClient, tenant: Tenant) -> None:
    await _allow(client, tenant, ["*"])
    origin = f"https://{uuid.uuid4().hex[:10]}.example"
    r = await client.get("/v1/settings", headers={**tenant.headers, "Origin": origin})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == origin  # the origin, never "*"
    assert "access-control-allow-credentials" not in r.headers

    assert (await _allow(client, tenant, None))["cors_origins"] == []  # the default again
    r = await client.get("/v1/settings", headers={**tenant.headers, "Origin": origin})
    assert r.status_code == 403  # at once in this process


async def test_keepmems_own_pages_and_mcp(client: httpx.AsyncClient, tenant: Tenant) -> None:
    # The Origin of the host it is sent to is no other origin.
    r = await client.get(
        "/v1/settings", headers={**tenant.headers, "Origin": "http://keepmem.test"}
    )
    assert r.status_code == 200
    assert "access-control-allow-origin" not in r.headers
    # MCP is for programs: a page of another origin is refused, allowed or not.
    await _allow(client, tenant, [APP])
    r = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**tenant.headers, "Origin": APP, "Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 403
    assert "MCP" in r.json()["error"]


async def test_what_is_not_an_origin_is_refused(client: httpx.AsyncClient, tenant: Tenant) -> None:
    for bad in ("https://app.example/path", "ftp://app.example", "app.example", ""):
        r = await client.patch("/v1/settings", json={"cors_origins": [bad]}, headers=tenant.headers)
        assert r.status_code == 422, (bad, r.text)
    r = await client.patch(
        "/v1/settings", json={"cors_origins": ["https://a.example:99999"]}, headers=tenant.headers
    )
    assert r.status_code == 400
    assert "port" in r.json()["error"]
    many = [f"https://h{i}.example" for i in range(51)]
    r = await client.patch("/v1/settings", json={"cors_origins": many}, headers=tenant.headers)
    assert r.status_code == 422
    # Nothing of the refused changes was kept.
    assert (await client.get("/v1/settings", headers=tenant.headers)).json()["cors_origins"] == []
