"""Notes routes on real Postgres: happy paths and keep's rules."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.conftest import Tenant


def path(note_id: str) -> str:
    return "/v1/notes/" + quote(note_id, safe="")


async def put(client: httpx.AsyncClient, t: Tenant, **body: object) -> dict:
    r = await client.post("/v1/notes", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def test_put_short_content_is_its_own_summary(client, tenant) -> None:
    note = await put(client, tenant, content="OAuth2 uses PKCE", id="auth", tags={"Topic": "auth"})
    assert note["id"] == "auth"
    assert note["summary"] == "OAuth2 uses PKCE"
    assert note["changed"] is True
    assert note["tags"]["topic"] == "auth"  # keys case-folded
    for key in ("_created", "_updated", "_updated_date", "_accessed", "_source", "_content_type"):
        assert key in note["tags"]
    assert note["tags"]["_source"] == "inline"
    assert note["pending"] == ["embed", "extract_graph"]


async def test_put_long_content_gets_placeholder_and_summarize_job(client, tenant) -> None:
    text = "word " * 200
    note = await put(client, tenant, content=text, id="long")
    assert note["summary"].endswith("...")
    assert len(note["summary"]) == 203
    assert sorted(note["pending"]) == ["embed", "extract_graph", "summarize"]


async def test_put_without_id_is_content_addressed(client, tenant) -> None:
    note = await put(client, tenant, content="remember the milk")
    assert note["id"].startswith("%") and len(note["id"]) == 13
    again = await put(client, tenant, content="remember the milk", tags={"k": "v"})
    assert again["id"] == note["id"]
    r = await client.get(path(note["id"]), headers=tenant.headers)
    assert r.status_code == 200 and r.json()["tags"]["k"] == "v"


async def test_system_tags_from_user_are_ignored(client, tenant) -> None:
    note = await put(
        client, tenant, content="x", id="sys", tags={"_created": "1999-01-01", "a": "b"}
    )
    assert note["tags"]["_created"] != "1999-01-01"
    assert note["tags"]["a"] == "b"


async def test_content_change_archives_version_tag_change_does_not(client, tenant) -> None:
    await put(client, tenant, content="first", id="v", tags={"a": "1"})
    await put(client, tenant, content="first", id="v", tags={"b": "2"})  # same content
    r = await client.get(path("v") + "/versions", headers=tenant.headers)
    assert r.json()["count"] == 0
    updated = await put(client, tenant, content="second", id="v")
    assert updated["tags"]["a"] == "1" and updated["tags"]["b"] == "2"  # tags merge
    await put(client, tenant, content="third", id="v")
    r = await client.get(path("v") + "/versions", headers=tenant.headers)
    body = r.json()
    assert body["count"] == 2
    assert [v["offset"] for v in body["versions"]] == [1, 2]
    assert [v["summary"] for v in body["versions"]] == ["second", "first"]
    assert (await client.get(path("v@V{0}"), headers=tenant.headers)).json()["summary"] == "third"
    assert (await client.get(path("v@V{1}"), headers=tenant.headers)).json()["summary"] == "second"
    assert (await client.get(path("v@V{2}"), headers=tenant.headers)).json()["summary"] == "first"
    oldest = (await client.get(path("v@V{-1}"), headers=tenant.headers)).json()
    assert oldest["summary"] == "first" and oldest["id"] == "v@V{2}"
    r = await client.get(path("v@V{3}"), headers=tenant.headers)
    assert r.status_code == 404


async def test_identical_put_changes_nothing(client, tenant) -> None:
    await put(client, tenant, content="same", id="same", tags={"a": "1"})
    again = await put(client, tenant, content="same", id="same", tags={"a": "1"})
    assert again["changed"] is False


async def test_literal_id_wins_over_version_selector(client, tenant) -> None:
    await put(client, tenant, content="base", id="rel")
    await put(client, tenant, content="base v2", id="rel")
    await put(client, tenant, content="a note literally named so", id="rel@V{1}")
    r = await client.get(path("rel@V{1}"), headers=tenant.headers)
    assert r.json()["summary"] == "a note literally named so"


async def test_put_to_part_id_is_refused(client, tenant) -> None:
    r = await client.post(
        "/v1/notes", json={"content": "x", "id": "doc@P{1}"}, headers=tenant.headers
    )
    assert r.status_code == 400
    assert "part" in r.json()["error"]


async def test_uri_ids_are_normalised(client, tenant) -> None:
    note = await put(client, tenant, content="page", uri="HTTPS://Example.COM:443/a/./b/../c")
    assert note["id"] == "https://example.com/a/c"
    assert note["tags"]["_source"] == "uri"
    r = await client.get(path("https://EXAMPLE.com/a/c"), headers=tenant.headers)
    assert r.status_code == 200


async def test_ids_with_slashes_and_percent_round_trip(client, tenant) -> None:
    await put(client, tenant, content="file body", id="file:///tmp/a b/c.md")
    r = await client.get(path("file:///tmp/a b/c.md"), headers=tenant.headers)
    assert r.status_code == 200 and r.json()["summary"] == "file body"
    r = await client.get(path("file:///tmp/a b/c.md") + "/versions", headers=tenant.headers)
    assert r.status_code == 200


@pytest.mark.parametrize(
    "body, status",
    [
        ({}, 400),  # a rule, not the schema: content or uri
        ({"content": "x", "id": "bad;id"}, 400),
        ({"content": "x", "id": " padded"}, 400),
        ({"content": "x", "tags": {"9bad": "v"}}, 400),
        ({"content": "x", "tags": {"k": {"nested": 1}}}, 400),
        ({"content": "x", "tags": {"k": "v" * 5000}}, 400),
        ({"content": "x", "created_at": "yesterday-ish"}, 400),
        ({"content": 5}, 422),
        ({"uri": "ftp://example.com/x"}, 400),  # only http(s) can be fetched
        ({"content": "   "}, 400),
    ],
)
async def test_put_rejects_bad_input(client, tenant, body, status) -> None:
    r = await client.post("/v1/notes", json=body, headers=tenant.headers)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["error"] and err["code"] and err["request_id"]
    listed = await client.get("/v1/notes", headers=tenant.headers)
    assert listed.json()["count"] == 0  # nothing half-written


async def test_content_over_limit_is_413(client, tenant) -> None:
    r = await client.post("/v1/notes", json={"content": "x" * 150_000}, headers=tenant.headers)
    assert r.status_code == 413
    assert r.json()["code"] == "payload_too_large"


async def test_body_over_limit_is_413_before_parsing(client, tenant) -> None:
    r = await client.post(
        "/v1/notes",
        content=b'{"content": "' + b"x" * 300_000 + b'"}',
        headers={**tenant.headers, "content-type": "application/json"},
    )
    assert r.status_code == 413
    assert "request_id" in r.json()


async def test_created_at_override(client, tenant) -> None:
    note = await put(client, tenant, content="old", id="hist", created_at="2023-05-08T13:56:00")
    assert note["tags"]["_created"] == "2023-05-08T13:56:00"


async def test_list_filters_and_order(client, tenant) -> None:
    await put(client, tenant, content="a", id="proj/a", tags={"topic": "x", "kind": "k"})
    await put(client, tenant, content="b", id="proj/b", tags={"topic": ["x", "y"]})
    await put(client, tenant, content="c", id="other/c", tags={"topic": "y"})

    async def ids(**params: object) -> list[str]:
        r = await client.get("/v1/notes", params=params, headers=tenant.headers)
        assert r.status_code == 200, r.text
        return [n["id"] for n in r.json()["notes"]]

    assert await ids(order_by="id") == ["other/c", "proj/a", "proj/b"]
    assert await ids() == ["other/c", "proj/b", "proj/a"]  # newest first
    assert await ids(prefix="proj/", order_by="id") == ["proj/a", "proj/b"]
    assert await ids(prefix="*/[ab]", order_by="id") == ["proj/a", "proj/b"]
    assert await ids(prefix="?????/c") == ["other/c"]
    assert await ids(tag="topic=x", order_by="id") == ["proj/a", "proj/b"]
    assert await ids(tag=["topic=x", "topic=y"]) == ["proj/b"]
    assert await ids(tag="topic=X", order_by="id") == [
        "proj/a",
        "proj/b",
    ]  # values case-insensitive
    assert await ids(tag_key="kind") == ["proj/a"]
    assert await ids(since="P1D", order_by="id") == ["other/c", "proj/a", "proj/b"]
    assert await ids(until="P1D") == []
    assert await ids(since="2000-01-01", until="2000-02-01") == []


async def test_list_hides_system_notes_unless_asked(client, tenant) -> None:
    r = await client.get("/v1/notes", headers=tenant.headers)
    assert all(not n["id"].startswith(".") for n in r.json()["notes"])
    r = await client.get(
        "/v1/notes", params={"include_hidden": "true", "limit": 100}, headers=tenant.headers
    )
    ids = {n["id"] for n in r.json()["notes"]}
    assert {".now", ".tag/act", ".tag/status/open", ".meta/todo", ".prompt/agent/reflect"} <= ids
    r = await client.get(
        "/v1/notes", params={"prefix": ".tag/act", "order_by": "id"}, headers=tenant.headers
    )
    assert r.json()["notes"][0]["tags"]["_constrained"] == "true"


async def test_list_pagination_offset_and_cursor(client, tenant) -> None:
    for i in range(7):
        await put(client, tenant, content=f"n{i}", id=f"n{i}")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, object] = {"limit": 3, "order_by": "updated"}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get("/v1/notes", params=params, headers=tenant.headers)).json()
        seen += [n["id"] for n in body["notes"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert seen == [f"n{i}" for i in reversed(range(7))]
    r = await client.get("/v1/notes", params={"limit": 2, "offset": 5}, headers=tenant.headers)
    assert [n["id"] for n in r.json()["notes"]] == ["n1", "n0"]
    r = await client.get("/v1/notes", params={"cursor": "garbage!"}, headers=tenant.headers)
    assert r.status_code == 400
    r = await client.get("/v1/notes", params={"limit": 5000}, headers=tenant.headers)
    assert r.status_code == 422  # the schema states the maximum
    r = await client.get("/v1/notes", params={"order_by": "size"}, headers=tenant.headers)
    assert r.status_code == 422
    r = await client.get("/v1/notes", params={"since": "sometime"}, headers=tenant.headers)
    assert r.status_code == 400


async def test_tag_set_remove_and_remove_values(client, tenant) -> None:
    await put(client, tenant, content="t", id="t", tags={"a": ["1", "2"], "b": "x", "c": "y"})
    r = await client.patch(
        path("t") + "/tags",
        json={"set": {"d": "new", "c": ""}, "remove": ["b"], "remove_values": {"a": "1"}},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    tags = r.json()["tags"]
    assert tags["a"] == "2" and tags["d"] == "new"
    assert "b" not in tags and "c" not in tags
    r = await client.get(path("t") + "/versions", headers=tenant.headers)
    assert r.json()["count"] == 0  # tags change in place
    r = await client.patch(
        path("t") + "/tags", json={"set": {"_source": "x"}}, headers=tenant.headers
    )
    assert r.json()["changed"] is False
    r = await client.patch(
        path("missing") + "/tags", json={"set": {"a": "b"}}, headers=tenant.headers
    )
    assert r.status_code == 404
    r = await client.patch(
        path("t") + "/tags", json={"set": {"bad key": "b"}}, headers=tenant.headers
    )
    assert r.status_code == 400


async def test_tag_value_limit(client, tenant) -> None:
    await put(client, tenant, content="t", id="many")
    r = await client.patch(
        path("many") + "/tags",
        json={"set": {"k": [str(i) for i in range(513)]}},
        headers=tenant.headers,
    )
    assert r.status_code == 400 and "512" in r.json()["error"]


async def test_delete_with_history(client, tenant) -> None:
    await put(client, tenant, content="one", id="d")
    await put(client, tenant, content="two", id="d")
    r = await client.delete(path("d"), headers=tenant.headers)
    assert r.status_code == 200 and r.json()["deleted"] == "d"
    assert (await client.get(path("d"), headers=tenant.headers)).status_code == 404
    assert (await client.get(path("d@V{1}"), headers=tenant.headers)).status_code == 404
    assert (await client.delete(path("d"), headers=tenant.headers)).status_code == 404


async def test_delete_without_history_reverts(client, tenant) -> None:
    await put(client, tenant, content="one", id="r", tags={"v": "1"})
    await put(client, tenant, content="two", id="r", tags={"w": "2"})
    r = await client.delete(path("r"), params={"delete_versions": "false"}, headers=tenant.headers)
    body = r.json()
    assert body["reverted"] is True and body["note"]["summary"] == "one"
    assert "w" not in body["note"]["tags"]
    got = (await client.get(path("r"), headers=tenant.headers)).json()
    assert got["summary"] == "one"
    r = await client.delete(path("r"), params={"delete_versions": "false"}, headers=tenant.headers)
    assert r.json()["reverted"] is False
    assert (await client.get(path("r"), headers=tenant.headers)).status_code == 404


async def test_now_is_created_from_template_on_first_read(client, tenant) -> None:
    r = await client.get(path("now"), headers=tenant.headers)
    assert r.status_code == 200
    template = (await client.get(path(".now"), headers=tenant.headers)).json()["summary"]
    assert r.json()["summary"] == template and template.startswith("# Keep")  # keep's own
    r = await client.get(path("now:alice"), headers=tenant.headers)
    assert r.json()["tags"]["user"] == "alice"


async def test_move_extracts_versions_from_now(client, tenant) -> None:
    await put(client, tenant, content="step 1", id="now", tags={"task": "a"})
    await put(client, tenant, content="step 2", id="now", tags={"task": "b"})
    await put(client, tenant, content="step 3", id="now")
    r = await client.post(
        "/v1/move", json={"name": "archive", "tags": {"task": "a"}}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    moved = r.json()
    # all three versions carry task=a (tags accumulate), so all move
    assert moved["summary"] == "step 3"
    assert moved["tags"]["_saved_from"] == "now"
    versions = (await client.get(path("archive") + "/versions", headers=tenant.headers)).json()
    assert [v["summary"] for v in versions["versions"]] == ["step 2", "step 1"]
    now = (await client.get(path("now"), headers=tenant.headers)).json()
    template = (await client.get(path(".now"), headers=tenant.headers)).json()["summary"]
    assert now["summary"] == template  # reset to the template


async def test_move_only_current_and_errors(client, tenant) -> None:
    await put(client, tenant, content="s1", id="src")
    await put(client, tenant, content="s2", id="src")
    r = await client.post(
        "/v1/move",
        json={"name": "dst", "source": "src", "only_current": True},
        headers=tenant.headers,
    )
    assert r.json()["summary"] == "s2"
    assert (await client.get(path("src"), headers=tenant.headers)).json()["summary"] == "s1"
    r = await client.post(
        "/v1/move",
        json={"name": "dst2", "source": "src", "tags": {"no": "pe"}},
        headers=tenant.headers,
    )
    assert r.status_code == 400  # a rule beyond the schema
    r = await client.post("/v1/move", json={"name": "x", "source": "ghost"}, headers=tenant.headers)
    assert r.status_code == 404
    r = await client.post(
        "/v1/move", json={"name": "d@p1", "source": "src"}, headers=tenant.headers
    )
    assert r.status_code == 400


async def test_parts_listing_and_missing_part(client, tenant) -> None:
    await put(client, tenant, content="doc", id="doc")
    r = await client.get(path("doc") + "/parts", headers=tenant.headers)
    assert r.json() == {"parts": [], "count": 0}
    r = await client.get(path("doc@P{1}"), headers=tenant.headers)
    assert r.status_code == 404
    r = await client.get(path("nodoc") + "/parts", headers=tenant.headers)
    assert r.status_code == 404


@pytest.mark.parametrize(
    "method, url, kwargs, status",
    [
        ("GET", "/v1/notes/bad%3Bid", {}, 400),
        ("GET", "/v1/notes/ok/versions", {"params": {"limit": 0}}, 422),
        ("GET", "/v1/notes/ok/versions", {"params": {"offset": -1}}, 422),
        ("GET", "/v1/notes/bad%3Bid/parts", {}, 400),
        ("PATCH", "/v1/notes/ok/tags", {"json": {"set": "not-a-map"}}, 422),
        ("PATCH", "/v1/notes/ok/tags", {"json": {"remove_values": {"k": {"x": 1}}}}, 400),
        ("DELETE", "/v1/notes/bad%3Bid", {}, 400),
        ("DELETE", "/v1/notes/ok", {"params": {"delete_versions": "maybe"}}, 422),
        ("POST", "/v1/move", {"json": {"source": "ok"}}, 422),
        ("POST", "/v1/move", {"json": {"name": "", "source": "ok"}}, 400),
        ("POST", "/v1/move", {"json": {"name": "ok", "source": "ok"}}, 400),
        ("GET", "/v1/notes", {"params": {"tag": "no-equals-sign"}}, 400),
        ("GET", "/v1/notes", {"params": {"tag": "9bad=v"}}, 400),
        ("POST", "/v1/keys", {"json": {"name": "x", "scopes": []}}, 422),
        ("DELETE", "/v1/keys/not-a-uuid", {}, 422),
    ],
)
async def test_every_route_rejects_bad_input(client, tenant, method, url, kwargs, status) -> None:
    await put(client, tenant, content="fine", id="ok")
    r = await client.request(method, url, headers=tenant.headers, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"] and r.json()["request_id"]
    assert (await client.get(path("ok"), headers=tenant.headers)).json()["summary"] == "fine"


async def test_same_content_keeps_an_explicit_summary(client, tenant) -> None:
    await put(client, tenant, content="body text", id="s", summary="my summary")
    again = await put(client, tenant, content="body text", id="s", tags={"a": "b"})
    assert again["summary"] == "my summary"
    changed = await put(client, tenant, content="body text", id="s", summary="better")
    assert changed["summary"] == "better" and changed["changed"] is True
