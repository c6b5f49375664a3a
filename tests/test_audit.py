"""The audit log: every write, administration and authentication event, in
the same transaction as the change; readable by admin credentials with
filters and paging; never editable through the API; no note content."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app import tenancy
from app.audit import service as audit_service

CONTENT = "the launch code is 0000-SECRET"


async def _audit(client, tenant, **params) -> dict:
    r = await client.get("/v1/audit", headers=tenant.headers, params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def test_writes_are_recorded_with_who_what_and_request_id(client, tenant) -> None:
    put = await client.post(
        "/v1/notes", headers=tenant.headers, json={"id": "audited", "content": CONTENT}
    )
    assert put.status_code == 200
    tagged = await client.patch(
        "/v1/notes/audited/tags", headers=tenant.headers, json={"set": {"k": "v"}}
    )
    assert tagged.status_code == 200
    page = await _audit(client, tenant, action="api.")
    put_entry = next(e for e in page["entries"] if e["action"] == "api.put_note")
    assert put_entry["target"] == "audited" and put_entry["outcome"] == "ok"
    assert put_entry["request_id"] == put.headers["x-request-id"]
    assert put_entry["actor"].startswith("key:")
    assert any(e["action"] == "api.tag_note" for e in page["entries"])
    # no content, anywhere in the trail
    assert "SECRET" not in str(await _audit(client, tenant, limit=1000))


async def test_a_refused_write_is_recorded_with_its_outcome(client, tenant) -> None:
    r = await client.patch(
        "/v1/notes/missing/tags", headers=tenant.headers, json={"set": {"a": "b"}}
    )
    assert r.status_code == 404
    page = await _audit(client, tenant, outcome="error")
    entry = page["entries"][0]
    assert entry["action"] == "api.tag_note" and entry["outcome"] == "error:note_not_found"
    assert entry["request_id"] == r.headers["x-request-id"]
    # the failed write left nothing else behind
    assert not any(e["action"] == "api.tag_note" and e["outcome"] == "ok" for e in page["entries"])


async def test_admin_and_authentication_events(client, tenant) -> None:
    made = await client.post("/v1/keys", headers=tenant.headers, json={"name": "temp"})
    key = made.json()
    await client.delete(f"/v1/keys/{key['id']}", headers=tenant.headers)
    r = await client.get("/v1/notes", headers={"Authorization": f"Bearer {key['key']}"})
    assert r.status_code == 401
    actions = [e["action"] for e in (await _audit(client, tenant))["entries"]]
    assert {"key.create", "key.revoke", "auth.refused"} <= set(actions)
    refused = (await _audit(client, tenant, action="auth.refused"))["entries"][0]
    assert refused["actor"] == f"key:{key['id']}" and refused["outcome"] == "error:unauthorized"


async def test_filters_and_paging(client, tenant) -> None:
    for i in range(5):
        await client.post("/v1/notes", headers=tenant.headers, json={"id": f"p{i}", "content": "x"})
    first = await _audit(client, tenant, action="api.put_note", limit=2)
    assert len(first["entries"]) == 2 and first["next_cursor"]
    second = await _audit(
        client, tenant, action="api.put_note", limit=2, cursor=first["next_cursor"]
    )
    entries = first["entries"] + second["entries"]
    assert [e["target"] for e in entries] == ["p4", "p3", "p2", "p1"]  # newest first
    assert len({e["id"] for e in entries}) == 4
    only = await _audit(client, tenant, target="p3")
    assert [e["target"] for e in only["entries"]] == ["p3"]


async def test_only_unrestricted_admins_read_it_and_nobody_edits_it(
    client, tenant, other_tenant, db
) -> None:
    await client.post("/v1/notes", headers=tenant.headers, json={"content": "mine"})
    writer = await client.post(
        "/v1/keys", headers=tenant.headers, json={"name": "w", "scopes": ["read", "write"]}
    )
    r = await client.get("/v1/audit", headers={"Authorization": f"Bearer {writer.json()['key']}"})
    assert r.status_code == 403
    # another tenant's admin sees only its own trail
    theirs = (await _audit(client, other_tenant, limit=1000))["entries"]
    assert all(e["actor"] != "key:" + writer.json()["id"] for e in theirs)
    for method in ("PUT", "PATCH", "DELETE"):
        r = await client.request(method, "/v1/audit", headers=tenant.headers)
        assert r.status_code == 405
    # and the application's database role can only append
    async with tenancy.tenant_id_transaction(db, tenant.id) as session:
        with pytest.raises(Exception, match="permission denied"):
            await session.execute(text("UPDATE audit_log SET action = 'x'"))
    async with tenancy.tenant_id_transaction(db, tenant.id) as session:
        with pytest.raises(Exception, match="permission denied"):
            await session.execute(text("DELETE FROM audit_log"))


async def test_retention_drops_old_entries(client, tenant, db) -> None:
    await client.post("/v1/notes", headers=tenant.headers, json={"content": "old news"})
    assert (await _audit(client, tenant))["entries"]
    pruned = await audit_service.prune_expired(db, retention_days=-1)
    assert pruned >= 1
    assert (await _audit(client, tenant))["entries"] == []


async def test_a_cursor_whose_entry_is_gone_or_not_ours_is_a_clear_400(
    client, tenant, other_tenant
) -> None:
    """A cursor is looked up in the caller's own trail: one whose entry was
    erased with its project, or another tenant's, is 400 ``cursor_expired``
    (its place is lost: read again without a cursor); text that is no
    cursor at all is 400 ``invalid_cursor``."""
    gone = tenant.project("gone")
    for i in range(3):
        r = await client.post("/v1/notes", headers=gone, json={"id": f"g{i}", "content": "x"})
        assert r.status_code == 200
    page = await _audit(client, tenant, action="api.put_note", limit=1)
    cursor = page["next_cursor"]
    assert (await _audit(client, tenant, action="api.put_note", cursor=cursor))["entries"]
    r = await client.get("/v1/audit", params={"cursor": cursor}, headers=other_tenant.headers)
    assert r.status_code == 400 and r.json()["code"] == "cursor_expired", r.text
    assert (await client.delete("/v1/projects/gone", headers=tenant.headers)).status_code == 204
    r = await client.get("/v1/audit", params={"cursor": cursor}, headers=tenant.headers)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "cursor_expired" and "without" in body["error"] and body["request_id"]
    assert (await _audit(client, tenant))["entries"]  # starting again works
    # a number: a cursor from before they were ids, whose place is lost too
    r = await client.get("/v1/audit", params={"cursor": "812"}, headers=tenant.headers)
    assert r.status_code == 400 and r.json()["code"] == "cursor_expired", r.text
    for bad in ("-1", "99999999999999999999", "x" * 500, cursor.upper() + "0", ""):
        r = await client.get("/v1/audit", params={"cursor": bad}, headers=tenant.headers)
        assert r.status_code == 400 and r.json()["code"] == "invalid_cursor", (bad, r.text)
