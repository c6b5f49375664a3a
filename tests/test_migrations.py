"""One head; upgrade -> downgrade -> upgrade on a fresh database."""

from __future__ import annotations

import uuid

from alembic.script import ScriptDirectory

from app.cli import migrate
from tests.conftest import APP_ROLE, Stack


def test_single_head() -> None:
    config = migrate.alembic_config("postgresql+asyncpg://unused/unused", APP_ROLE)
    heads = ScriptDirectory.from_config(config).get_heads()
    assert len(heads) == 1


def _tables(stack: Stack, database: str) -> set[str]:
    out = stack.pg.psql(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'", database=database
    )
    return {line.strip() for line in out.splitlines() if line.strip()}


def test_upgrade_downgrade_upgrade(stack: Stack) -> None:
    name = f"mig_{uuid.uuid4().hex[:8]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    url = stack.pg.url("postgres", database=name)
    try:
        migrate.upgrade(url, APP_ROLE)
        tables = _tables(stack, name)
        assert {
            "tenants",
            "notes",
            "note_versions",
            "parts",
            "embeddings",
            "edges",
            "jobs",
            "changes",
            "audit_log",
            "api_keys",
            "projects",
            "alembic_version",
        } <= tables
        rls = stack.pg.psql(
            "SELECT count(*) FROM pg_class WHERE relrowsecurity AND relnamespace = "
            "'public'::regnamespace",
            database=name,
        )
        # tenants + TENANT_TABLES (webhooks, note_texts and citations among
        # them) + 4 OAuth + 2 usage + 6 of sessions
        assert int(rls.strip()) == 34
        hnsw = stack.pg.psql(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_embeddings_hnsw_384'",
            database=name,
        )
        assert "hnsw" in hnsw and "vector_cosine_ops" in hnsw
        migrate.downgrade(url, APP_ROLE)
        assert _tables(stack, name) == {"alembic_version"}
        migrate.upgrade(url, APP_ROLE)
        assert "notes" in _tables(stack, name)
    finally:
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")


def test_migrate_creates_role_that_can_log_in_for_external_postgres(stack: Stack) -> None:
    name = f"mig_{uuid.uuid4().hex[:8]}"
    role = f"km_{uuid.uuid4().hex[:8]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    url = stack.pg.url("postgres", database=name)
    try:
        migrate.upgrade(url, role)
        before = stack.pg.psql(f"SELECT rolcanlogin FROM pg_roles WHERE rolname = '{role}'")
        assert before.strip() == "f"
        migrate.set_app_login(url, role, "s3cret'quote")
        after = stack.pg.psql(
            f"SELECT rolcanlogin, rolsuper, rolbypassrls, rolpassword IS NOT NULL "
            f"FROM pg_authid WHERE rolname = '{role}'"
        )
        assert after.strip() == "t|f|f|t"
        granted = stack.pg.psql(
            f"SELECT has_table_privilege('{role}', 'notes', 'SELECT')", database=name
        )
        assert granted.strip() == "t"
    finally:
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")
        stack.pg.psql(f"DROP OWNED BY {role}; DROP ROLE {role}")


def test_public_ids_are_given_to_the_rows_already_there(stack: Stack) -> None:
    """0014 on a database with audit entries and changes: each existing row
    gets its own random public id (the append-only log included: adding a
    column is the owner's DDL, not an UPDATE the application role is
    denied), the application role still cannot edit the log, and the
    downgrade takes the column away again."""
    name = f"mig_{uuid.uuid4().hex[:8]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    url = stack.pg.url("postgres", database=name)
    tenant = uuid.uuid4()
    try:
        migrate.upgrade(url, APP_ROLE, "0013")
        stack.pg.psql(
            f"INSERT INTO tenants (id, name) VALUES ('{tenant}', 'old');"
            f"INSERT INTO projects (tenant_id, slug) VALUES ('{tenant}', 'default');"
            f"INSERT INTO audit_log (tenant_id, actor, action) "
            f"SELECT '{tenant}', 'cli', 'old.' || n FROM generate_series(1, 50) n;"
            f"INSERT INTO changes (tenant_id, project_id, mutation, entity_id) "
            f"SELECT '{tenant}', id, 'doc_insert', 'n' || n "
            f"FROM projects, generate_series(1, 50) n",
            database=name,
        )
        migrate.upgrade(url, APP_ROLE, "0014")
        for table in ("audit_log", "changes"):
            got = stack.pg.psql(
                f"SELECT count(*), count(DISTINCT public_id), "
                f"bool_and(substr(public_id::text, 15, 1) = '4') FROM {table}",
                database=name,
            )
            assert got.strip() == "50|50|t", (table, got)
        privileges = stack.pg.psql(
            f"SELECT has_table_privilege('{APP_ROLE}', 'audit_log', 'UPDATE'), "
            f"has_table_privilege('{APP_ROLE}', 'audit_log', 'INSERT')",
            database=name,
        )
        assert privileges.strip() == "f|t"
        migrate.downgrade(url, APP_ROLE, "0013")
        left = stack.pg.psql(
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'public_id' "
            "AND table_name IN ('audit_log', 'changes')",
            database=name,
        )
        assert left.strip() == "0"
    finally:
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")
