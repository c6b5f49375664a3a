"""A put writes its own expiry (``ttl_seconds`` / ``expires_at``): in the
put's transaction, with a change-feed entry, through the notes domain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.notes import service
from app.notes.service import Limits, PutInput
from app.tenancy import scope_for_job
from tests.conftest import Tenant


class _Abandon(Exception):
    """Raised to roll the transaction back."""


async def _scope(db: Database, tenant: Tenant) -> tenancy.Scope:
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        project_id, slug = (
            await s.execute(
                text("SELECT id, slug FROM projects WHERE tenant_id = :t ORDER BY slug LIMIT 1"),
                {"t": tenant.id},
            )
        ).one()
    return scope_for_job(tenant.id, project_id, slug)


async def _state(s, note_id: str) -> tuple[datetime | None, list[dict]]:
    expires = await s.scalar(text("SELECT expires_at FROM notes WHERE id = :n"), {"n": note_id})
    changes = (
        await s.execute(
            text(
                "SELECT mutation, kind, payload FROM changes WHERE entity_id = :n "
                "AND jsonb_exists(payload, 'expires_at') ORDER BY id"
            ),
            {"n": note_id},
        )
    ).all()
    return expires, [{"mutation": m, "kind": k, **p} for m, k, p in changes]


async def test_a_put_with_a_ttl_writes_its_expiry_and_its_change_in_its_own_transaction(
    db: Database, tenant: Tenant
) -> None:
    scope = await _scope(db, tenant)
    start = datetime.now(UTC)
    with pytest.raises(_Abandon):
        async with tenancy.transaction(db, scope) as s:
            data = PutInput(id="ttl-note", content="expires within the hour", ttl_seconds=3600)
            view = await service.put(s, scope, data=data, limits=Limits())
            assert view.id == "ttl-note"
            # the same transaction sees the expiry and the change that records it
            expires, changes = await _state(s, "ttl-note")
            assert expires is not None
            assert timedelta(seconds=3590) < expires - start < timedelta(seconds=3610)
            assert changes == [
                {"mutation": "doc_update", "kind": None, "expires_at": expires.isoformat()}
            ]
            raise _Abandon
    # rolled back with the put: nothing of either was written elsewhere
    async with tenancy.transaction(db, scope) as s:
        assert await _state(s, "ttl-note") == (None, [])


async def test_expiry_through_the_api_is_recorded_and_cleared_by_a_zero_ttl(
    client, db: Database, tenant: Tenant
) -> None:
    h = tenant.headers
    r = await client.post(
        "/v1/notes", headers=h, json={"id": "ttl-api", "content": "x", "ttl_seconds": 60}
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        "/v1/notes/batch",
        headers=h,
        json={"notes": [{"id": "ttl-batch", "content": "y", "expires_at": "2031-01-02T03:04:05Z"}]},
    )
    assert r.status_code == 200 and r.json()["stored"] == 1, r.text
    r = await client.post(
        "/v1/notes", headers=h, json={"id": "ttl-api", "content": "x", "ttl_seconds": 0}
    )
    assert r.status_code == 200, r.text
    scope = await _scope(db, tenant)
    async with tenancy.transaction(db, scope) as s:
        expires, changes = await _state(s, "ttl-api")
        assert expires is None  # 0: never expires
        assert [c["expires_at"] is None for c in changes] == [False, True]
        expires, changes = await _state(s, "ttl-batch")
        assert expires == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
        assert [c["expires_at"] for c in changes] == [expires.isoformat()]


async def test_a_bad_expiry_refuses_the_put_and_writes_nothing(client, db, tenant) -> None:
    h = tenant.headers
    r = await client.post(
        "/v1/notes",
        headers=h,
        json={
            "id": "ttl-bad",
            "content": "x",
            "ttl_seconds": 5,
            "expires_at": "2031-01-01T00:00:00Z",
        },
    )
    assert r.status_code == 400 and "not both" in r.json()["error"]
    r = await client.post(
        "/v1/notes/batch",
        headers=h,
        json={
            "notes": [
                {"id": "ttl-ok", "content": "x"},
                {"id": "ttl-bad", "content": "x", "expires_at": "soon"},
            ]
        },
    )
    assert r.status_code == 400 and "expires_at" in r.json()["error"]
    for note_id in ("ttl-bad", "ttl-ok"):
        assert (await client.get(f"/v1/notes/{note_id}", headers=h)).status_code == 404
