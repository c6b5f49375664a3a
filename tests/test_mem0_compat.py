"""The mem0-compatible API (``/mem0``): mem0's real client (mem0ai 2.2.1,
in its own virtualenv: ``make mem0-client``, ``KEEPMEM_MEM0_PYTHON``)
against a live keepmem, two users in two tenants; then the refusals and the
authentication, straight over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MakeTenant, Tenant
from tests.test_pipeline import run_all

DEFAULT_MEM0 = Path.home() / ".cache" / "keepmem" / "mem0-venv" / "bin" / "python"
MEM0_PYTHON = Path(os.environ.get("KEEPMEM_MEM0_PYTHON", DEFAULT_MEM0))
DRIVER = Path(__file__).parent / "mem0_driver.py"


def _drive(mode: str, url: str, a: Tenant, b: Tenant, home: Path, *extra: str) -> dict[str, Any]:
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "MEM0_DIR": str(home / ".mem0"),
        "MEM0_TELEMETRY": "false",  # mem0/memory/telemetry.py: no posthog calls
    }
    out = subprocess.run(
        [str(MEM0_PYTHON), str(DRIVER), mode, f"{url}/mem0", a.key, b.key, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def _work(make_pipeline: Any, client: httpx.AsyncClient, *tenants: Tenant) -> None:
    """What the worker would do: extraction, then the embeddings it causes."""
    pipeline = make_pipeline()
    for _ in range(3):
        for t in tenants:
            await run_all(pipeline, client, t)


@pytest.mark.skipif(
    not MEM0_PYTHON.exists(),
    reason=f"mem0's client is not installed ({MEM0_PYTHON}): run `make mem0-client`",
)
async def test_mem0_client_two_users_two_tenants(
    live_url: str, make_tenant: MakeTenant, client: httpx.AsyncClient, make_pipeline: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    a, b = await make_tenant(), await make_tenant()
    wrote = _drive("write", live_url, a, b, tmp_path / "home")
    assert wrote["ping"] == {"org_id": str(a.id), "project_id": "default"}
    assert [e["event"] for e in wrote["hiking"]["results"]] == ["ADD", "ADD"]
    assert all(e["id"].startswith("mem/") for e in wrote["hiking"]["results"])
    tea = wrote["tea"]["results"][0]["id"]
    assert wrote["again"]["results"] == [{**wrote["tea"]["results"][0], "event": "NONE"}]
    assert wrote["inferred"]["status"] == "PENDING" and wrote["inferred"]["results"] == []
    await _work(make_pipeline, client, a, b)

    state = tmp_path / "state.json"
    state.write_text(json.dumps(wrote))
    r = _drive("read", live_url, a, b, tmp_path / "home", str(state))
    hiking = r["hiking_id"]
    a_ids = {e["id"] for k in ("hiking", "nurse", "tea") for e in wrote[k]["results"]}

    # search: filters, the user filter separating users, tenants apart
    assert r["search_alice"][0]["id"] == hiking
    assert {m["user_id"] for m in r["search_alice"]} == {"alice"}
    assert all(isinstance(m["score"], float) for m in r["search_alice"])
    assert [m["id"] for m in r["search_bob_or"]] == [tea]
    assert tea not in {m["id"] for m in r["search_alice_tea"]}
    assert r["search_b"] and not {m["id"] for m in r["search_b"]} & a_ids
    assert [m["memory"] for m in r["search_run"]] == ["Alice works as a nurse in Lyon"]
    assert {m["metadata"]["source"] for m in r["search_meta"]} == {"chat"}

    # get_all: pages of mem0's shape
    p1, p2 = r["page1"], r["page2"]
    assert p1["count"] == p2["count"] == 3
    assert len(p1["results"]) == 2 and p1["next"] and p1["previous"] is None
    assert len(p2["results"]) == 1 and p2["next"] is None and p2["previous"]
    assert "page=2" in p1["next"] and "page_size=2" in p1["next"]
    assert len({m["id"] for m in p1["results"] + p2["results"]}) == 3
    assert r["bob_all"]["count"] == 1 and r["bob_all"]["results"][0]["agent_id"] == "helper"
    assert [m["memory"] for m in r["b_alice"]["results"]] == ["Alice likes opera and hiking"]
    # infer (the default): keepmem's memory formation made Dora's memories
    assert any("Berlin" in m["memory"] for m in r["dora_all"]["results"]), r["dora_all"]

    # get, update, history; tenant B reaches none of it
    got = r["got"]
    assert got["memory"] == "I love hiking in the Alps" and got["user_id"] == "alice"
    assert got["metadata"] == {"source": "chat", "n": 1, "tags": ["outdoor"]}
    for refused in ("b_get", "b_update", "b_history", "b_delete"):
        assert r[refused] == "MemoryNotFoundError", refused
    assert r["updated"]["memory"] == "I love hiking in the Dolomites"
    assert r["updated"]["metadata"] == {"source": "edit"}
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in r["history"]] == [
        ("ADD", None, "I love hiking in the Alps"),
        ("UPDATE", "I love hiking in the Alps", "I love hiking in the Dolomites"),
    ]
    assert r["after_b"]["memory"] == "I love hiking in the Dolomites"

    users = {(e["type"], e["name"]): e["total_memories"] for e in r["users"]["results"]}
    assert users[("user", "alice")] == 3 and users[("user", "bob")] == 1
    assert users[("agent", "helper")] == 1 and users[("run", "run-1")] == 1

    # delete, batch update / delete, delete_all, delete_users
    assert r["tea_gone"] == "MemoryNotFoundError"
    assert r["batched"][0]["memory"] == "one batched"
    assert r["batched"][1]["metadata"] == {"k": 2}
    assert r["batch_gone"] == ["MemoryNotFoundError", "MemoryNotFoundError"]
    assert r["alice_after"]["count"] == 0
    assert r["b_alice_after"]["count"] == 1  # tenant B's alice is another alice
    assert r["dora_after"]["count"] == 0
    # what mem0 offers and keepmem does not: mem0's own error, carrying why
    for call, (kind, message) in r["not_offered"].items():
        assert kind == "MemoryError" and "keepmem's mem0 API does not offer" in message, call

    # the async client
    done = r["async"]
    assert done["added"]["results"][0]["event"] == "ADD"
    assert [m["memory"] for m in done["found"]] == ["Carol keeps bees"]
    assert done["listed"]["count"] == 1


# -- over HTTP: authentication and refusals ----------------------------------------------


def _token(t: Tenant) -> dict[str, str]:
    return {"Authorization": f"Token {t.key}"}


async def _add(client: httpx.AsyncClient, t: Tenant, **body: Any) -> httpx.Response:
    payload = {"messages": [{"role": "user", "content": "I like tea"}], **body}
    return await client.post("/mem0/v3/memories/add/", json=payload, headers=_token(t))


async def test_token_and_bearer_are_accepted_and_no_key_is_401(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    for auth in (f"Token {tenant.key}", f"Bearer {tenant.key}", f"token  {tenant.key} "):
        r = await client.get("/mem0/v1/ping/", headers={"Authorization": auth})
        assert r.status_code == 200, (auth, r.text)
        assert r.json()["org_id"] == str(tenant.id)
    for headers in ({}, {"Authorization": "Token "}, {"Authorization": "Token km_nope"},
                    {"Authorization": f"Basic {tenant.key}"}):  # fmt: skip
        r = await client.get("/mem0/v1/ping/", headers=headers)
        assert r.status_code == 401, (headers, r.text)
    # mem0's scheme is for /mem0 only
    r = await client.get("/v1/memories", headers=_token(tenant))
    assert r.status_code == 401


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"enable_graph": True, "infer": False}, "enable_graph"),
        ({"custom_categories": [{"a": "b"}], "infer": False}, "custom_categories"),
        ({"immutable": True, "infer": False}, "immutable"),
        ({"expiration_date": "2030-01-01", "infer": False}, "expiration_date"),
        ({"output_format": "v1.0", "infer": False}, "output_format"),
        ({"metadata": {"a": 1}}, "metadata"),  # with infer (the default)
        ({"app_id": "shop"}, "app_id"),
        ({"infer": True, "async_mode": False}, "async_mode"),
        ({"run_id": "bad id", "infer": False}, "run_id"),
        ({"project_id": "elsewhere", "infer": False}, "X-Project"),
        ({"org_id": "someone-else", "infer": False}, "org_id"),
        ({"user_id": "a", "filters": {"user_id": "b"}, "infer": False}, "user_id"),
    ],
)
async def test_what_keepmem_cannot_honour_is_refused_by_name(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any], named: str
) -> None:
    r = await _add(client, tenant, **body)
    assert r.status_code == 400, r.text
    assert named in r.json()["error"] and named in r.json()["detail"]


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        ({"user_id": {"regex": "a.*"}}, "regex"),
        ({"categories": {"in": ["x"]}}, "categories"),
        ({"colour": "blue"}, "colour"),
        ({"AND": []}, "AND"),
        ({"created_at": {"gte": "last tuesday"}}, "created_at"),
        ({"keywords": "tea"}, "keywords"),
        ({"user_id": {"in": "alice"}}, "user_id.in"),
    ],
)
async def test_bad_filters_are_refused_naming_them(
    client: httpx.AsyncClient, tenant: Tenant, filters: dict[str, Any], named: str
) -> None:
    for path, body in (
        ("/mem0/v3/memories/search/", {"query": "tea", "filters": filters}),
        ("/mem0/v3/memories/", {"filters": filters}),
    ):
        r = await client.post(path, json=body, headers=_token(tenant))
        assert r.status_code == 400, (path, r.text)
        assert named in r.json()["error"], r.text


async def test_other_parameters_refused_and_delete_all_needs_an_owner(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    r = await client.post(
        "/mem0/v3/memories/search/", json={"query": "x", "categories": ["a"]},
        headers=_token(tenant),
    )  # fmt: skip
    assert r.status_code == 400 and "categories" in r.json()["error"]
    r = await client.delete("/mem0/v1/memories/", headers=_token(tenant))
    assert r.status_code == 400 and "user_id" in r.json()["error"]
    made = (await _add(client, tenant, infer=False, user_id="u")).json()["results"][0]["id"]
    r = await client.put(
        f"/mem0/v1/memories/{made}/", json={"expiration_date": "2031-01-01"},
        headers=_token(tenant),
    )  # fmt: skip
    assert r.status_code == 400 and "expiration_date" in r.json()["error"]
    r = await client.put(f"/mem0/v1/memories/{made}/", json={}, headers=_token(tenant))
    assert r.status_code == 400


async def test_ids_round_trip_encoded_bare_and_plain(
    client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
) -> None:
    made = (await _add(client, tenant, infer=False, user_id="u")).json()["results"][0]["id"]
    assert made.startswith("mem/")
    bare = made.removeprefix("mem/")
    for path in (made.replace("/", "%2F"), made, bare):
        r = await client.get(f"/mem0/v1/memories/{path}/", headers=_token(tenant))
        assert r.status_code == 200 and r.json()["id"] == made, (path, r.text)
        r = await client.get(f"/mem0/v1/memories/{path}/history/", headers=_token(tenant))
        assert r.status_code == 200 and r.json()[0]["event"] == "ADD"
        r = await client.get(f"/mem0/v1/memories/{path}/", headers=_token(other_tenant))
        assert r.status_code == 404
    for missing in ("mem%2Fnot-there", f"{made}@V0", "thread%2Fx"):
        r = await client.get(f"/mem0/v1/memories/{missing}/", headers=_token(tenant))
        assert r.status_code == 404, (missing, r.text)
    # a history is not a memory id: writing to it is a 405, not an update of "<id>/history"
    r = await client.put(f"/mem0/v1/memories/{made}/history/", json={}, headers=_token(tenant))
    assert r.status_code == 405 and r.headers["allow"] == "GET"


async def test_x_project_picks_the_project(client: httpx.AsyncClient, tenant: Tenant) -> None:
    in_p = {**_token(tenant), "X-Project": "mem0-side"}
    r = await client.post(
        "/mem0/v3/memories/add/",
        json={"messages": [{"role": "user", "content": "kept apart"}], "infer": False,
              "user_id": "u", "project_id": "mem0-side"},
        headers=in_p,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    listed = {"filters": {"user_id": "u"}}
    there = await client.post("/mem0/v3/memories/", json=listed, headers=in_p)
    default = await client.post("/mem0/v3/memories/", json=listed, headers=_token(tenant))
    assert there.json()["count"] == 1 and default.json()["count"] == 0
    ping = await client.get("/mem0/v1/ping/", headers=in_p)
    assert ping.json()["project_id"] == "mem0-side"


async def test_entities_and_their_deletion(client: httpx.AsyncClient, tenant: Tenant) -> None:
    await _add(client, tenant, infer=False, user_id="zoe", app_id="shop")
    r = await client.get("/mem0/v1/entities/", headers=_token(tenant))
    found = {(e["type"], e["name"]) for e in r.json()["results"]}
    assert found == {("user", "zoe"), ("app", "shop")}
    r = await client.delete("/mem0/v2/entities/app/shop/", headers=_token(tenant))
    assert r.status_code == 200, r.text
    r = await client.delete("/mem0/v2/entities/app/shop/", headers=_token(tenant))
    assert r.status_code == 404
    r = await client.get("/mem0/v1/entities/", headers=_token(tenant))
    assert r.json()["results"] == []


async def test_the_mem0_routes_are_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in ("/mem0/v1/ping/", "/mem0/v3/memories/add/", "/mem0/v3/memories/",
                 "/mem0/v3/memories/search/", "/mem0/v1/memories/{memory_id}/",
                 "/mem0/v1/memories/{memory_id}/history/", "/mem0/v1/memories/",
                 "/mem0/v1/entities/", "/mem0/v2/entities/{entity_type}/{name}/",
                 "/mem0/v1/batch/"):  # fmt: skip
        assert path in paths, path


@pytest.mark.parametrize(
    ("method", "path", "feature"),
    [
        ("POST", "/v1/exports/", "memory exports"),
        ("POST", "/v1/exports/get/", "memory exports"),
        ("POST", "/v1/summary/", "summaries"),
        ("POST", "/v1/feedback/", "feedback"),
        ("GET", "/v2/entities/user/alice/profile/", "profiles"),
        ("POST", "/v2/profiles/settings/", "profiles"),
        ("GET", "/api/v1/orgs/organizations/o/projects/p/", "project settings"),
        ("DELETE", "/api/v1/webhooks/7/", "webhooks"),
    ],
)
async def test_what_mem0_offers_and_keepmem_does_not_is_a_501_naming_it(
    client: httpx.AsyncClient, tenant: Tenant, method: str, path: str, feature: str
) -> None:
    """mem0's client shows ``detail``: the feature, and keepmem's nearest
    route where there is one. A bad key is still a 401, and deleting a user
    (the same path family as profiles) still reaches its own route."""
    r = await client.request(method, f"/mem0{path}", json={}, headers=_token(tenant))
    assert r.status_code == 501 and r.json()["code"] == "not_offered", r.text
    assert feature in r.json()["detail"] and r.json()["detail"] == r.json()["error"]
    r = await client.request(method, f"/mem0{path}", json={}, headers={"Authorization": "Token x"})
    assert r.status_code == 401, r.text
    r = await client.delete("/mem0/v2/entities/user/nobody/", headers=_token(tenant))
    assert r.status_code == 404 and r.json()["code"] == "entity_not_found", r.text
