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
    assert r.status_code == 404 and r.json()["code"] == "route_not_found"
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


async def test_docs_page_is_self_contained(client) -> None:
    """/docs works on a closed network: every script, style and icon it
    references is served by keepmem itself."""
    import re

    page = await client.get("/docs")
    assert page.status_code == 200
    refs = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page.text)
    assert refs, page.text
    for ref in refs:
        assert not re.match(r"^(?:[a-z]+:)?//", ref), f"/docs references an outside host: {ref}"
        assert (await client.get(ref)).status_code == 200, ref
    assert "validatorUrl" in page.text  # turned off: the badge would come from swagger.io
    assert "/docs/assets/swagger-ui-bundle.js" in refs


ERROR_STATUSES = ("400", "401", "404", "422", "429", "503")


async def test_openapi_states_errors_limits_and_patterns(client) -> None:
    """Every operation declares the error statuses it can answer, in the one
    error shape; every integer parameter has a maximum; ids, X-Project and
    scopes state their rules."""
    spec = (await client.get("/openapi.json")).json()
    error_ref = "#/components/schemas/ErrorOut"
    oauth_ref = "#/components/schemas/OAuthErrorOut"
    # The OAuth protocol endpoints answer 400 and 401 as RFC 6749 says; MCP
    # (one path, no ids, no schema of its own for pydantic to refuse) answers
    # a message that is not JSON-RPC with a JSON-RPC error.
    protocol = {"/oauth/token", "/oauth/revoke", "/oauth/introspect", "/oauth/register"}
    jsonrpc = {"anyOf": [{"$ref": "#/components/schemas/JsonRpcAnswer"}, {"$ref": error_ref}]}
    project_headers = note_paths = 0
    for route, ops in spec["paths"].items():
        for method, op in ops.items():
            mcp = route == "/mcp"
            for status in ("400", "401", "429", "503") if mcp else ERROR_STATUSES:
                declared = op["responses"].get(status)
                assert declared, f"{method.upper()} {route} does not declare {status}"
                schema = declared["content"]["application/json"]["schema"]
                expected = (
                    oauth_ref if route in protocol and status in ("400", "401") else error_ref
                )
                if mcp and status == "400":
                    assert schema == jsonrpc, schema
                    continue
                assert schema == {"$ref": expected}, (route, status, schema)
            for param in op.get("parameters", []):
                schema = param["schema"]
                options = schema.get("anyOf", [schema])
                for option in options:
                    if option.get("type") == "integer":
                        assert "maximum" in option, f"{route} {param['name']} has no maximum"
                if param["name"].lower() == "x-project":
                    project_headers += 1
                    assert schema.get("pattern") and schema.get("maxLength") == 63
                if param["name"] == "note_id":
                    options = schema.get("anyOf", [schema])
                    note_paths += 1
                    option = next(o for o in options if o.get("type") == "string")
                    assert option["minLength"] == 1 and option["maxLength"] >= 1024
    assert project_headers > 20 and note_paths > 8
    key_create = spec["components"]["schemas"]["KeyCreate"]["properties"]["scopes"]
    assert key_create["items"]["enum"] == ["read", "write", "admin"]
    search = spec["components"]["schemas"]["SearchRequest"]["properties"]
    assert search["query"]["anyOf"][0]["maxLength"] == 10_000


async def test_405_lists_every_method_of_the_path(client, tenant) -> None:
    r = await client.request("TRACE", "/v1/notes", headers=tenant.headers)
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"
    assert r.headers["allow"] == "GET, POST"
    r = await client.put("/v1/notes/x", headers=tenant.headers)
    assert r.headers["allow"] == "DELETE, GET"


async def test_405_allow_prefers_the_concrete_path(client, tenant) -> None:
    """/v1/notes/batch is its own path (POST), not a note id under /v1/notes/{id}."""
    r = await client.request("TRACE", "/v1/notes/batch", headers=tenant.headers)
    assert r.headers["allow"] == "POST"
