"""The project settings API (/v1/settings): every setting read with the
server's defaults, changed by an admin key, taking effect where each is
used (ingest, find, sessions, memories), audited, and confined to the
request's project."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app import tenancy
from app.search import ranking
from app.sessions.cleaning import DEFAULT_EXCLUDES
from tests.conftest import Tenant
from tests.test_sessions import digest, ev, send

AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
DEFAULTS = {
    "sanitize": True,
    "decay_half_life_days": 30.0,
    "auto_tag": False,
    "keep_text": False,
    "cors_origins": [],
    "sessions": {
        "capture": True,
        "inject": True,
        "excludes": list(DEFAULT_EXCLUDES),
        "resume_chars": 6000,
        "llm_tokens_per_day": None,
    },
    "memories": {"llm_tokens_per_day": None},
}


async def settings(client: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, Any]:
    r = await client.get("/v1/settings", headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def change(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    r = await client.patch("/v1/settings", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def key(client: httpx.AsyncClient, t: Tenant, *scopes: str) -> dict[str, str]:
    r = await client.post("/v1/keys", json={"name": "k", "scopes": list(scopes)}, headers=t.headers)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


async def test_a_new_project_reads_the_server_defaults(client, tenant) -> None:
    assert await settings(client, tenant.headers) == {"project": "default", **DEFAULTS}
    reader = await key(client, tenant, "read")
    shown = await settings(client, {**reader, "X-Project": "default"})
    assert shown == {"project": "default", **DEFAULTS}


async def test_turning_sanitising_off_stores_text_as_written(client, tenant) -> None:
    assert (await change(client, tenant.headers, sanitize=False))["sanitize"] is False
    r = await client.post(
        "/v1/notes", json={"id": "raw", "content": "key " + AWS}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    got = (await client.get("/v1/notes/raw", headers=tenant.headers)).json()
    assert AWS in got["summary"]
    # null puts the default back: sanitising again
    assert (await change(client, tenant.headers, sanitize=None))["sanitize"] is True
    r = await client.post(
        "/v1/notes", json={"id": "clean", "content": "key " + AWS}, headers=tenant.headers
    )
    got = (await client.get("/v1/notes/clean", headers=tenant.headers)).json()
    assert AWS not in got["summary"] and "[REDACTED:aws-access-key]" in got["summary"]


async def test_the_half_life_changes_finds_recency(client, tenant, db) -> None:
    for note_id in ("new", "old"):
        r = await client.post(
            "/v1/notes",
            json={"id": note_id, "content": "Weekly sync with the design team."},
            headers=tenant.headers,
        )
        assert r.status_code == 200, r.text
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(
            text("UPDATE notes SET updated_at = now() - interval '7 days' WHERE id = 'old'")
        )

    async def recency() -> dict[str, float]:
        r = await client.post(
            "/v1/search",
            json={"query": "weekly design sync", "explain": True},
            headers=tenant.headers,
        )
        assert r.status_code == 200, r.text
        return {n["id"]: n["explain"]["recency"] for n in r.json()["notes"]}

    full = ranking.RECENCY_WEIGHT
    assert (await change(client, tenant.headers, decay_half_life_days=7))[
        "decay_half_life_days"
    ] == 7.0
    got = await recency()
    assert got["new"] == pytest.approx(full) and got["old"] == pytest.approx(full / 2, rel=1e-3)
    await change(client, tenant.headers, decay_half_life_days=0)
    assert await recency() == {"new": 0.0, "old": 0.0}
    await change(client, tenant.headers, decay_half_life_days=3.5)
    assert (await recency())["old"] == pytest.approx(full / 4, rel=1e-3)


async def test_sessions_and_memories_settings_are_their_routes_own(
    client, tenant, make_pipeline
) -> None:
    shown = await change(
        client,
        tenant.headers,
        auto_tag=True,
        sessions={"excludes": ["*.plan"], "resume_chars": 800},
        memories={"llm_tokens_per_day": 5},
    )
    assert shown["auto_tag"] is True
    assert shown["sessions"] == {
        **DEFAULTS["sessions"],
        "excludes": ["*.plan"],
        "resume_chars": 800,
    }
    assert shown["memories"] == {"llm_tokens_per_day": 5}
    r = await client.get("/v1/sessions/settings", headers=tenant.headers)
    assert r.json()["excludes"] == ["*.plan"] and r.json()["resume_chars"] == 800
    r = await client.get("/v1/memories/settings", headers=tenant.headers)
    assert r.json()["llm_tokens_per_day"] == 5
    # a field left out keeps its value; the others of sessions merge
    shown = await change(client, tenant.headers, sessions={"inject": False})
    assert shown["sessions"]["excludes"] == ["*.plan"] and shown["sessions"]["inject"] is False
    assert shown["auto_tag"] is True and shown["memories"] == {"llm_tokens_per_day": 5}

    # hook intake cleans with the new excludes at once (its cache was dropped)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(
        client,
        tenant,
        ev(sid, "tool_result", tool_name="Read", tool_input={"file_path": "launch.plan"},
           tool_output="launch word xyzzy42"),
    )  # fmt: skip
    await digest(make_pipeline, client, tenant)
    items = (await client.get(f"/v1/sessions/{sid}/timeline", headers=tenant.headers)).json()
    assert "not stored" in items["items"][0]["summary"]
    assert "xyzzy42" not in str(items)

    # null: back to the server's defaults
    shown = await change(client, tenant.headers, sessions=None, memories=None, auto_tag=None)
    assert shown == {"project": "default", **DEFAULTS}


async def test_only_an_admin_key_changes_settings(client, tenant) -> None:
    writer = await key(client, tenant, "read", "write")
    reader = await key(client, tenant, "read")
    for headers in (writer, reader):
        r = await client.patch("/v1/settings", json={"sanitize": False}, headers=headers)
        assert r.status_code == 403, r.text
        assert (await settings(client, headers))["sanitize"] is True
    # a key with a tag scope sees part of the project: no settings at all
    r = await client.post(
        "/v1/subkeys",
        json={"name": "team", "tags": {"team": "a"}, "expires_in_seconds": 600},
        headers=tenant.headers,
    )
    assert r.status_code == 201, r.text
    tagged = {"Authorization": f"Bearer {r.json()['key']}"}
    r = await client.get("/v1/settings", headers=tagged)
    assert r.status_code == 403 and r.json()["code"] == "outside_scope", r.text
    r = await client.patch("/v1/settings", json={"sanitize": False}, headers=tagged)
    assert r.status_code == 403, r.text
    assert (await settings(client, tenant.headers))["sanitize"] is True


async def test_a_change_stays_in_its_project(client, tenant, other_tenant) -> None:
    await change(client, tenant.project("one"), decay_half_life_days=2, sanitize=False)
    assert await settings(client, tenant.project("two")) == {"project": "two", **DEFAULTS}
    assert await settings(client, tenant.headers) == {"project": "default", **DEFAULTS}
    theirs = await settings(client, other_tenant.project("one"))
    assert theirs == {"project": "one", **DEFAULTS}
    mine = await settings(client, tenant.project("one"))
    assert (mine["decay_half_life_days"], mine["sanitize"]) == (2.0, False)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"sanitize": "no"}, "sanitize"),
        ({"sanitize": 0}, "sanitize"),
        ({"auto_tag": "true"}, "auto_tag"),
        ({"decay_half_life_days": "7"}, "decay_half_life_days"),
        ({"decay_half_life_days": True}, "decay_half_life_days"),
        ({"decay_half_life_days": -1}, "decay_half_life_days"),
        ({"decay_half_life_days": 2_000_000}, "decay_half_life_days"),
        ({"sessions": {"resume_chars": 10}}, "resume_chars"),
        ({"sessions": {"excludes": [""]}}, "excludes"),
        ({"sessions": {"bogus": 1}}, "bogus"),
        ({"memories": {"llm_tokens_per_day": "5"}}, "llm_tokens_per_day"),
        ({"memories": {"llm_tokens_per_day": -5}}, "llm_tokens_per_day"),
        ({"colour": "blue"}, "colour"),
    ],
)
async def test_bad_values_are_refused_with_the_field_named(client, tenant, body, where) -> None:
    r = await client.patch("/v1/settings", json=body, headers=tenant.headers)
    assert r.status_code == 422, r.text
    assert where in r.text
    assert await settings(client, tenant.headers) == {"project": "default", **DEFAULTS}


async def test_text_that_cannot_be_stored_is_a_400(client, tenant) -> None:
    r = await client.patch(
        "/v1/settings", json={"sessions": {"excludes": ["a\u0000b"]}}, headers=tenant.headers
    )
    assert r.status_code == 400 and r.json()["code"] == "invalid_input", r.text
    assert "NUL" in r.json()["error"]


async def test_every_change_is_audited_with_what_changed(client, tenant) -> None:
    await change(client, tenant.project("audited"), sanitize=False, sessions={"inject": False})
    r = await client.get("/v1/audit", params={"action": "project.settings"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    (entry,) = r.json()["entries"]
    assert entry["target"] == "audited" and entry["outcome"] == "ok"
    assert entry["detail"] == {"changed": {"sanitize": False, "sessions": {"inject": False}}}
    assert entry["actor"].startswith("key:")
    # a refused change changes nothing, so records no change of settings
    r = await client.patch("/v1/settings", json={"sanitize": "x"}, headers=tenant.headers)
    assert r.status_code == 422
    r = await client.get("/v1/audit", params={"action": "project.settings"}, headers=tenant.headers)
    assert len(r.json()["entries"]) == 1


async def test_the_async_sdk_reads_and_changes_settings(client, asgi_app, tenant) -> None:
    from keepmem_client import AsyncKeepmem, PermissionDeniedError

    transport = httpx.ASGITransport(app=asgi_app)
    async with AsyncKeepmem("http://keepmem.test", tenant.key, transport=transport) as km:
        shown = await km.settings()
        assert shown.project == "default" and shown.sanitize is True
        assert shown.sessions.excludes == list(DEFAULT_EXCLUDES)
        changed = await km.update_settings(
            decay_half_life_days=2.5,
            sessions={"capture": False},
            memories={"llm_tokens_per_day": 9},
        )
        assert changed.decay_half_life_days == 2.5 and changed.sessions.capture is False
        assert changed.memories == {"llm_tokens_per_day": 9}
        back = await km.update_settings(decay_half_life_days=None)  # None: the default
        assert back.decay_half_life_days == 30.0 and back.sessions.capture is False
    reader = (await key(client, tenant, "read"))["Authorization"].removeprefix("Bearer ")
    async with AsyncKeepmem("http://keepmem.test", reader, transport=transport) as km:
        assert (await km.settings()).decay_half_life_days == 30.0
        with pytest.raises(PermissionDeniedError):
            await km.update_settings(sanitize=False)


def test_the_sync_sdk_reads_and_changes_settings(live_url, tenant) -> None:
    from keepmem_client import Keepmem, ValidationError

    with Keepmem(live_url, tenant.key, project="sdk") as km:
        assert km.settings().project == "sdk"
        assert km.update_settings(sanitize=False, auto_tag=True).auto_tag is True
        shown = km.settings()
        assert (shown.sanitize, shown.auto_tag) == (False, True)
        with pytest.raises(ValidationError):
            km.update_settings(decay_half_life_days="soon")
