"""Row-level security on its own stops cross-tenant reads and writes.

These queries deliberately carry no tenant filter: only the policies stand
between tenant A's transaction and tenant B's rows.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app import tenancy
from app.models import TENANT_TABLES
from tests.conftest import Tenant


async def _seed(client, t: Tenant, note_id: str) -> None:
    r = await client.post(
        "/v1/notes", json={"content": "x " * 300, "id": note_id}, headers=t.headers
    )
    assert r.status_code == 200


async def test_unfiltered_select_sees_only_own_tenant(client, db, tenant, other_tenant) -> None:
    await _seed(client, tenant, "a-note")
    await _seed(client, other_tenant, "b-note")
    async with tenancy.tenant_id_transaction(db, tenant.id) as session:
        rows = (await session.execute(text("SELECT DISTINCT tenant_id FROM notes"))).scalars().all()
        assert rows == [tenant.id]
        ids = (
            (await session.execute(text("SELECT id FROM notes WHERE id LIKE '_-note'")))
            .scalars()
            .all()
        )
        assert ids == ["a-note"]
        for table in TENANT_TABLES:
            seen = (
                (await session.execute(text(f"SELECT DISTINCT tenant_id FROM {table}")))
                .scalars()
                .all()
            )
            assert set(seen) <= {tenant.id}, table
        tenants = (await session.execute(text("SELECT id FROM tenants"))).scalars().all()
        assert tenants == [tenant.id]


async def test_no_tenant_set_sees_nothing(db, client, tenant) -> None:
    await _seed(client, tenant, "c-note")
    async with db.transaction() as session:
        for table in ("tenants", *TENANT_TABLES):
            count = (await session.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            assert count == 0, table


async def test_cannot_write_rows_for_another_tenant(db, client, tenant, other_tenant) -> None:
    await _seed(client, other_tenant, "victim")
    async with tenancy.tenant_id_transaction(db, tenant.id) as session:
        updated = await session.execute(
            text("UPDATE notes SET summary = 'pwned' WHERE id = 'victim'")
        )
        assert updated.rowcount == 0
        deleted = await session.execute(text("DELETE FROM notes WHERE id = 'victim'"))
        assert deleted.rowcount == 0
    with pytest.raises(DBAPIError, match="row-level security"):
        async with tenancy.tenant_id_transaction(db, tenant.id) as session:
            await session.execute(
                text("INSERT INTO audit_log (tenant_id, actor, action) VALUES (:t, 'x', 'y')"),
                {"t": other_tenant.id},
            )
    r = await client.get("/v1/notes/victim", headers=other_tenant.headers)
    assert r.json()["summary"].startswith("x x")


async def test_app_role_is_not_superuser_and_cannot_bypass(db) -> None:
    async with db.transaction() as session:
        row = (
            await session.execute(
                text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
            )
        ).one()
        assert tuple(row) == (False, False)


async def test_key_lookup_function_reveals_nothing_without_the_hash(db) -> None:
    async with db.transaction() as session:
        rows = (
            await session.execute(
                text("SELECT * FROM keepmem_resolve_api_key(:h)"), {"h": uuid.uuid4().bytes}
            )
        ).all()
        assert rows == []


async def test_the_scoped_role_holds_exactly_the_app_roles_privileges(settings) -> None:
    """A tag-scoped transaction switches to ``<app role>_scoped`` (the role
    the tag-scope policies apply to): a table granted to the application role
    but not to it would fail scoped requests, and one granted to it alone
    would widen them. Every migration must grant both."""
    from sqlalchemy import text

    from app.db import Database

    owner = Database(settings.owner_database_url or "")
    query = text(
        "SELECT table_name || ':' || privilege_type FROM information_schema.role_table_grants "
        "WHERE grantee = :r AND table_schema = 'public' ORDER BY 1"
    )
    try:
        async with owner.transaction() as session:
            app = list(await session.scalars(query, {"r": settings.app_role}))
            scoped = list(await session.scalars(query, {"r": f"{settings.app_role}_scoped"}))
    finally:
        await owner.dispose()
    assert app and scoped == app
