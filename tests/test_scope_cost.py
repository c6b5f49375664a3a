"""Tag scopes at the cost of an index condition (migration 0020).

The scope's terms travel as PostgreSQL's text form of a ``text[]`` and the
policies read them with an inlined cast; a child table's row is checked by
one probe of its note. These tests hold the security property to what it was: a scoped
transaction sees exactly the notes carrying every term and the rows of
every covered table that belong to them, whatever the terms' characters,
however tags change, and nothing when the scope is empty, absent or in the
old form. The plan tests keep the cheap form from quietly coming undone."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app import tenancy
from app.cli import migrate
from app.db import Database
from tests.conftest import APP_ROLE, Stack, Tenant

# note id -> tag terms (as tag_index holds them)
NOTES = {
    "a1": ["user", "user=alice", "team", "team=red"],
    "a2": ["user", "user=alice"],
    "b1": ["user", "user=bob", "team", "team=red"],
    "o1": [],
}
# Tables of rows that belong to one note (their tag-scope policies), and the
# column naming the note. Jobs and blobs have the same policy (checked in
# test_every_child_policy_names_the_tenant); jobs are also read in test_tag_scope.
CHILDREN = {
    "note_versions": "note_id",
    "parts": "note_id",
    "embeddings": "note_id",
    "mentions": "note_id",
    "relations": "note_id",
    "note_texts": "note_id",
    "citations": "note_id",
    "changes": "entity_id",
}
EDGES = [("a1", "a2"), ("a1", "b1"), ("a1@P1", "a2"), ("b1@P1", "a1"), ("o1", "a2")]
# entity -> the notes mentioning it
ENTITIES = {"e-alice": ["a2"], "e-bob": ["b1"], "e-both": ["a1", "b1"], "e-open": ["o1"]}


async def _project(db: Database, tenant_id: uuid.UUID) -> uuid.UUID:
    async with tenancy.tenant_id_transaction(db, tenant_id) as s:
        found = await s.scalar(text("SELECT id FROM projects WHERE slug = 'default'"))
    assert found is not None
    return uuid.UUID(str(found))


async def _seed(db: Database, tenant_id: uuid.UUID, prefix: str = "") -> uuid.UUID:
    """NOTES (ids prefixed) with a version, a part, a vector, mentions,
    relations, kept text, a citation and a change each; EDGES; ENTITIES."""
    project = await _project(db, tenant_id)
    p = {"t": tenant_id, "p": project}
    async with tenancy.tenant_id_transaction(db, tenant_id) as s:
        for key in (*ENTITIES, "s", "o"):  # "s" and "o": the relations' ends, mentioned by none
            await s.execute(
                text(
                    "INSERT INTO entities (tenant_id, project_id, key, name, kind) "
                    "VALUES (:t, :p, :k, :k, 'thing')"
                ),
                {**p, "k": key},
            )
        for note_id, terms in NOTES.items():
            row = {**p, "id": prefix + note_id, "terms": terms}
            await s.execute(
                text(
                    "INSERT INTO notes (tenant_id, project_id, id, summary, tags, tag_index, "
                    "created_at, updated_at, accessed_at) "
                    "VALUES (:t, :p, :id, 'text of ' || :id, '{}', :terms, now(), now(), now())"
                ),
                row,
            )
            for statement in (
                "INSERT INTO note_versions (tenant_id, project_id, note_id, version, summary, "
                "created_at, updated_at) VALUES (:t, :p, :id, 1, 'old', now(), now())",
                "INSERT INTO parts (tenant_id, project_id, note_id, part_num, summary) "
                "VALUES (:t, :p, :id, 1, 'part')",
                "INSERT INTO embeddings (tenant_id, project_id, note_id, kind, ref, model, dim, "
                "embedding) VALUES (:t, :p, :id, 'note', 0, 'm', 3, '[1,0,0]')",
                "INSERT INTO relations (tenant_id, project_id, note_id, subject_key, predicate, "
                "object_key, span_start, span_end) VALUES (:t, :p, :id, 's', 'r', 'o', 0, 1)",
                "INSERT INTO note_texts (tenant_id, project_id, note_id, sha256, chars, data) "
                "VALUES (:t, :p, :id, 'x', 1, '\\x00')",
                "INSERT INTO citations (tenant_id, project_id, id, note_id, version, span_start, "
                "span_end, quote, text_sha256) "
                "VALUES (:t, :p, 'c-' || :id, :id, 1, 0, 1, 'q', 'x')",
                "INSERT INTO changes (tenant_id, project_id, mutation, entity_id) "
                "VALUES (:t, :p, 'doc_insert', :id)",
            ):
                await s.execute(text(statement), row)
        for key, mentioned_by in ENTITIES.items():
            for note_id in mentioned_by:
                await s.execute(
                    text(
                        "INSERT INTO mentions (tenant_id, project_id, note_id, entity_key, "
                        "span_start, span_end) VALUES (:t, :p, :id, :k, 0, 1)"
                    ),
                    {**p, "id": prefix + note_id, "k": key},
                )
        for source, target in EDGES:
            await s.execute(
                text(
                    "INSERT INTO edges (tenant_id, project_id, source_id, predicate, target_id) "
                    "VALUES (:t, :p, :s, 'links', :g)"
                ),
                {**p, "s": prefix + source, "g": prefix + target},
            )
    return project


def _scope(tenant_id: uuid.UUID, terms: Iterable[str]) -> tenancy.TenantScope:
    return tenancy.mint_tenant(
        tenant_id=tenant_id, key_id=None, permissions=frozenset({"read"}), tag_terms=terms
    )


async def _seen(db: Database, scope: tenancy.TenantScope) -> dict[str, set[object]]:
    """What a transaction bound to ``scope`` sees of every covered table, by
    row-level security alone (no filter in the statements)."""
    out: dict[str, set[object]] = {}
    async with tenancy.transaction(db, scope) as s:
        notes = await s.scalars(text("SELECT id FROM notes WHERE left(id, 1) <> '.'"))
        out["notes"] = set(notes)
        for table, column in CHILDREN.items():
            # system documents ('.' ids) are visible to every scope, read only
            query = f"SELECT {column} FROM {table} WHERE left({column}, 1) <> '.'"
            out[table] = set(await s.scalars(text(query)))
        edges = await s.execute(text("SELECT source_id, target_id FROM edges"))
        out["edges"] = {(r[0], r[1]) for r in edges}
        out["entities"] = set(await s.scalars(text("SELECT key FROM entities")))
    return out


def _expected(visible: set[str], prefix: str = "") -> dict[str, set[object]]:
    def note_of(end: str) -> str:
        return end.split("@", 1)[0]

    ids = {prefix + n for n in visible}
    out: dict[str, set[object]] = {"notes": ids}
    out.update({table: set(ids) for table in CHILDREN})
    out["edges"] = {
        (prefix + s, prefix + t)
        for s, t in EDGES
        if note_of(s) in visible and note_of(t) in visible
    }
    out["entities"] = {k for k, by in ENTITIES.items() if set(by) & visible}
    return out


async def test_a_scope_sees_every_table_of_its_notes_and_nothing_else(
    db: Database, tenant: Tenant, other_tenant: Tenant
) -> None:
    await _seed(db, tenant.id)
    # another tenant's notes carry the same terms: never seen
    await _seed(db, other_tenant.id, prefix="x-")
    for terms, visible in (
        (["user=alice"], {"a1", "a2"}),
        (["team=red"], {"a1", "b1"}),
        (["user=alice", "team=red"], {"a1"}),  # two terms: both must be held
        (["user=alice", "user=bob"], set()),
        (["user=carol"], set()),
    ):
        assert await _seen(db, _scope(tenant.id, terms)) == _expected(visible), terms
    # the unscoped tenant sees all of its own
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        count = await s.scalar(text("SELECT count(*) FROM notes WHERE left(id, 1) <> '.'"))
    assert count == len(NOTES)


async def test_a_note_whose_tags_change_comes_and_goes_with_its_rows(
    db: Database, tenant: Tenant
) -> None:
    await _seed(db, tenant.id)
    alice = _scope(tenant.id, ["user=alice"])
    assert (await _seen(db, alice))["note_versions"] == {"a1", "a2"}
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(text("UPDATE notes SET tag_index = '{team,team=red}' WHERE id = 'a1'"))
        await s.execute(text("UPDATE notes SET tag_index = '{user,user=alice}' WHERE id = 'b1'"))
    assert await _seen(db, alice) == _expected({"a2", "b1"})


async def test_terms_with_any_characters_are_matched_exactly(db: Database, tenant: Tenant) -> None:
    """The terms go through PostgreSQL's array text form: quotes, commas,
    braces, backslashes, spaces and the word NULL come back as they were."""
    project = await _project(db, tenant.id)
    odd = ["k=a,b", 'k="q"', "k={x}", "k=back\\slash", "k= spaced ", "null", "k=é"]
    holders = {
        "exact": odd,
        "split": ["k=a", "k=b", 'k="q"', "k={x}", "k=back\\slash", "k= spaced ", "null", "k=é"],
        "no-null": [t for t in odd if t != "null"],
    }
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        for note_id, terms in holders.items():
            await s.execute(
                text(
                    "INSERT INTO notes (tenant_id, project_id, id, summary, tag_index, "
                    "created_at, updated_at, accessed_at) "
                    "VALUES (:t, :p, :id, 'x', :terms, now(), now(), now())"
                ),
                {"t": tenant.id, "p": project, "id": note_id, "terms": terms},
            )
    async with tenancy.transaction(db, _scope(tenant.id, odd)) as s:
        assert await s.scalar(text("SELECT keepmem_tag_scope()")) == sorted(set(odd))
        seen = set(await s.scalars(text("SELECT id FROM notes WHERE left(id, 1) <> '.'")))
    assert seen == {"exact"}


@pytest.mark.parametrize("value", ["", "{}", "{ }"])
async def test_an_empty_scope_sees_no_note(db: Database, tenant: Tenant, value: str) -> None:
    await _seed(db, tenant.id)
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(
            text(
                "SELECT set_config('keepmem.tag_scope', :v, true), "
                "set_config('role', keepmem_scoped_role(), true)"
            ),
            {"v": value},
        )
        assert await s.scalar(text("SELECT current_user")) == f"{APP_ROLE}_scoped"
        notes = set(await s.scalars(text("SELECT id FROM notes WHERE left(id, 1) <> '.'")))
        vectors = await s.scalar(text("SELECT count(*) FROM embeddings"))
    assert notes == set() and vectors == 0


async def test_a_scope_in_the_old_form_fails_closed(db: Database, tenant: Tenant) -> None:
    """A JSON list (what code before migration 0020 set) is an error, never
    a wider view."""
    await _seed(db, tenant.id)
    with pytest.raises(DBAPIError, match="malformed array literal"):
        async with tenancy.tenant_id_transaction(db, tenant.id) as s:
            await s.execute(
                text(
                    "SELECT set_config('keepmem.tag_scope', '[\"user=alice\"]', true), "
                    "set_config('role', keepmem_scoped_role(), true)"
                )
            )
            await s.execute(text("SELECT id FROM notes"))


async def test_scoped_writes_are_still_checked(db: Database, tenant: Tenant) -> None:
    project = await _seed(db, tenant.id)
    alice = _scope(tenant.id, ["user=alice"])
    async with tenancy.transaction(db, alice) as s:
        changed = await s.execute(text("UPDATE notes SET summary = 'mine' WHERE id = 'b1'"))
        assert changed.rowcount == 0  # type: ignore[attr-defined]
        gone = await s.execute(text("DELETE FROM parts WHERE note_id = 'b1'"))
        assert gone.rowcount == 0  # type: ignore[attr-defined]
    with pytest.raises(DBAPIError, match="row-level security"):
        async with tenancy.transaction(db, alice) as s:
            await s.execute(
                text(
                    "INSERT INTO notes (tenant_id, project_id, id, summary, tag_index, "
                    "created_at, updated_at, accessed_at) "
                    "VALUES (:t, :p, 'sneak', 'x', '{user,user=bob}', now(), now(), now())"
                ),
                {"t": tenant.id, "p": project},
            )


async def test_the_scope_is_a_cheap_test_and_child_rows_are_probed(
    db: Database, tenant: Tenant
) -> None:
    """The cheap form: the plan tests the setting itself (a function call per
    row, or a JSON sub-select, would show as ``keepmem_tag_scope()``); a
    child row's check probes its own note and is never a hashed read of every
    visible note; entities' checks read the current tenant's mentions only."""
    await _seed(db, tenant.id)
    async with tenancy.transaction(db, _scope(tenant.id, ["user=alice"])) as s:
        plan = "\n".join(await s.scalars(text("EXPLAIN SELECT id FROM notes")))
        reads = []
        for table in (*CHILDREN, "edges"):
            explained = await s.scalars(text(f"EXPLAIN SELECT count(*) FROM {table}"))
            reads.append("\n".join(explained))
        policies = (
            await s.execute(text("SELECT tablename, policyname, qual FROM pg_policies"))
        ).all()
    assert "current_setting('keepmem.tag_scope'" in plan and "keepmem_tag_scope()" not in plan
    assert all("SubPlan" in r and "hashed" not in r for r in reads), reads
    children = [p for p in policies if p[1].startswith("tag_scope") and p[0] != "notes"]
    assert {p[0] for p in children} >= {*CHILDREN, "jobs", "blobs", "edges", "entities"}
    for table, name, qual in children:
        expected = "keepmem_current_tenant()" if table == "entities" else "OFFSET 0"
        assert qual is not None and expected in qual, (table, name, qual)


async def test_a_key_with_two_terms_through_the_api(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    owner = tenant.headers
    red_alice, red_bob = {"user": "alice", "team": "red"}, {"user": "bob", "team": "red"}
    for body in (
        {"id": "a1", "content": "river boat trip with the red team", "tags": red_alice},
        {"id": "a2", "content": "river boat trip alone", "tags": {"user": "alice"}},
        {"id": "b1", "content": "river boat trip with zebracorn", "tags": red_bob},
        {"id": "b1", "content": "river boat trip with zebracorn again", "tags": red_bob},
    ):
        r = await client.post("/v1/notes", headers=owner, json=body)
        assert r.status_code in (200, 201), r.text
    r = await client.post(
        "/v1/subkeys",
        headers=owner,
        json={"name": "both", "tags": {"user": "alice", "team": "red"}, "expires_in_seconds": 600},
    )
    assert r.status_code == 201, r.text
    both = {"Authorization": f"Bearer {r.json()['key']}"}
    listed = (await client.get("/v1/notes", headers=both)).json()["notes"]
    assert {n["id"] for n in listed if not n["id"].startswith(".")} == {"a1"}
    found = (
        await client.post("/v1/search", headers=both, json={"query": "river boat trip"})
    ).json()
    assert {n["id"] for n in found["notes"]} == {"a1"}
    assert "zebracorn" not in str(found).lower()
    old = "/v1/notes/" + quote("b1@V{1}", safe="")
    for path in ("/v1/notes/a2", "/v1/notes/b1", old):
        assert (await client.get(path, headers=both)).status_code == 404, path
    versions = await client.get("/v1/notes/b1/versions", headers=both)
    assert "zebracorn" not in versions.text
    # the owner does see them: the answers above are the scope's
    assert (await client.get(old, headers=owner)).status_code == 200


def test_the_downgrade_restores_the_json_scope(stack: Stack) -> None:
    name = f"mig_{uuid.uuid4().hex[:8]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    url = stack.pg.url("postgres", database=name)

    def scope_of(value: str) -> str:
        return stack.pg.psql(
            f"SELECT set_config('keepmem.tag_scope', '{value}', true), keepmem_tag_scope()",
            database=name,
        ).strip()

    def bound() -> str:
        return stack.pg.psql(
            "SELECT count(*) FROM pg_policies WHERE policyname LIKE 'tag_scope%' "
            "AND qual LIKE '%OFFSET 0%'",
            database=name,
        ).strip()

    try:
        migrate.upgrade(url, APP_ROLE)
        assert scope_of("{a=b,c}") == "{a=b,c}|{a=b,c}"
        assert int(bound()) > 0
        migrate.downgrade(url, APP_ROLE, "0019")
        assert scope_of('["a=b", "c"]') == '["a=b", "c"]|{a=b,c}'
        assert bound() == "0"
        migrate.upgrade(url, APP_ROLE)
        assert scope_of("{a=b}") == "{a=b}|{a=b}"
    finally:
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")
