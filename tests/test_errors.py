"""One error shape, request ids, docs."""

from __future__ import annotations

import uuid


async def test_request_id_in_header_and_body(client, tenant) -> None:
    r = await client.get("/v1/notes/missing", headers=tenant.headers)
    assert r.status_code == 404
    body = r.json()
    assert set(body) == {"error", "code", "request_id"}
    assert body["request_id"] == r.headers["x-request-id"]


async def test_client_request_id_is_echoed_when_sane(client, tenant) -> None:
    rid = uuid.uuid4().hex
    r = await client.get("/v1/notes", headers={**tenant.headers, "X-Request-ID": rid})
    assert r.headers["x-request-id"] == rid
    r = await client.get("/v1/notes", headers={**tenant.headers, "X-Request-ID": "bad id<>"})
    assert r.headers["x-request-id"] != "bad id<>"


async def test_validation_error_shape(client, tenant) -> None:
    r = await client.post(
        "/v1/notes",
        content=b"not json",
        headers={**tenant.headers, "content-type": "application/json"},
    )
    assert r.status_code == 422
    body = r.json()
    assert body["code"] == "invalid" and body["error"].startswith("invalid request")
    assert isinstance(body["detail"], list)


async def test_unknown_route_and_method(client, tenant) -> None:
    r = await client.get("/v1/nothing-here", headers=tenant.headers)
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = await client.put("/v1/notes", headers=tenant.headers)
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"


async def test_health_and_ready_need_no_key(client, tenant) -> None:
    r = await client.get("/v1/ready")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert r.json()["capabilities"]["api_version"] == 1
    r = await client.get("/v1/health")
    assert r.json()["item_count"] is None
    await client.post("/v1/notes", json={"content": "one"}, headers=tenant.headers)
    r = await client.get("/v1/health", headers=tenant.headers)
    assert r.json()["item_count"] == 1
    assert r.json()["warnings"] == []


async def test_openapi_documents_every_route_with_bearer(client) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["ApiKey"]["scheme"] == "bearer"
    for route, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op.get("description"), f"{method.upper()} {route} has no description"
            if route.startswith("/v1/notes") or route in ("/v1/move", "/v1/keys"):
                assert op.get("security"), f"{method.upper()} {route} has no security"
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
