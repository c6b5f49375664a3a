"""A project's profile (keep's ``stats`` action) counted on real Postgres:
tags (list values, edge tags), dates, versions, parts, edges; another
project's and another tenant's notes are not counted."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.errors import BadRequest
from app.notes import repository as repo
from app.notes import service as notes
from tests.conftest import Tenant


async def put(client: httpx.AsyncClient, headers: dict[str, str], **body: object) -> None:
    r = await client.post("/v1/notes", json=body, headers=headers)
    assert r.status_code == 200, r.text


async def project_scope(db: Database, tenant: Tenant, slug: str) -> tenancy.Scope:
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        project_id = await s.scalar(
            text("SELECT id FROM projects WHERE tenant_id = :t AND slug = :s"),
            {"t": tenant.id, "s": slug},
        )
    assert isinstance(project_id, uuid.UUID)
    return tenancy.scope_for_project(tenant.id, project_id, slug)


async def profile_of(db: Database, scope: tenancy.Scope, **kw: Any) -> dict[str, Any]:
    async with tenancy.tenant_id_transaction(db, scope.tenant_id) as s:
        return await notes.profile(s, scope, **kw)


# created_at per note; updated and accessed are one moment for all
CREATED = {
    "a": datetime.fromisoformat("2023-01-05 10:00:00+00:00"),
    "b": datetime.fromisoformat("2023-01-05 23:30:00-05:00"),  # 2023-01-06 in UTC
    "c": datetime.fromisoformat("2023-02-10 08:00:00+00:00"),
    "d": datetime.fromisoformat("2024-03-01 09:00:00+00:00"),
    "e": datetime.fromisoformat("2024-03-01 18:00:00+00:00"),
    "alice": datetime.fromisoformat("2024-07-04 12:00:00+00:00"),
}


@pytest.fixture
async def alpha(client: httpx.AsyncClient, db: Database, tenant: Tenant, other_tenant: Tenant):
    h = tenant.project("alpha")
    for note_id, tags in {
        "a": {"topic": "auth", "status": "open", "speaker": "alice"},
        "b": {"topic": ["auth", "db"], "status": "open", "speaker": "alice"},
        "c": {"topic": "db", "status": "done", "references": ["a", "b"]},
    }.items():
        await put(client, h, id=note_id, content=note_id, tags=tags)
    for content in ("d1", "d2"):  # one earlier version
        await put(client, h, id="d", content=content, tags={"topic": "ui", "status": "open"})
    for content in ("e1", "e2", "e3"):  # two earlier versions
        await put(client, h, id="e", content=content, tags={"topic": "ui", "status": "open"})
    # a tag change alone keeps no version
    for change in ({"set": {"draft": "yes"}}, {"remove": ["draft"]}):
        r = await client.patch("/v1/notes/a/tags", json=change, headers=h)
        assert r.status_code == 200, r.text
    # noise the alpha profile must not count
    beta = tenant.project("beta")
    await put(client, beta, id="x", content="x", tags={"topic": "other", "speaker": "bob"})
    await put(client, beta, id="x", content="x2", tags={"topic": "other", "speaker": "bob"})
    await put(client, other_tenant.project("alpha"), id="y", content="y", tags={"topic": "auth"})
    scope = await project_scope(db, tenant, "alpha")
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        for note_id, created in CREATED.items():
            await s.execute(
                text(
                    "UPDATE notes SET created_at = :c, updated_at = '2024-05-01 12:00:00+00', "
                    "accessed_at = '2024-05-02 12:00:00+00' "
                    "WHERE tenant_id = :t AND project_id = :p AND id = :id"
                ),
                {"c": created, "t": tenant.id, "p": scope.project_id, "id": note_id},
            )
        await repo.insert_parts(
            s, scope, "a", [(n, f"part {n}", {}, f"h{n}", f"part {n}") for n in (1, 2, 3)]
        )
        await repo.insert_parts(s, scope, "b", [(1, "part 1", {}, "h1", "part 1")])
    return scope


async def test_profile_counts_tags_dates_and_structure(db, alpha) -> None:
    got = await profile_of(db, alpha)
    # five notes written and the stub the speaker edge made for alice
    assert got["total"] == 6
    assert got["all_tags"] == ["status", "topic", "speaker", "references"]
    assert got["tags"] == {
        "status": {
            "count": 5,
            "distinct": 2,
            "unique": 1,
            "coverage": 0.833,
            "categorical": True,
            "edge": False,
            "top": {"open": 4, "done": 1},
        },
        "topic": {
            "count": 5,
            "distinct": 3,
            "unique": 0,
            "coverage": 0.833,
            "categorical": False,
            "edge": False,
            "top": {"auth": 2, "db": 2, "ui": 2},
        },
        "speaker": {
            "count": 2,
            "distinct": 1,
            "unique": 0,
            "coverage": 0.333,
            "categorical": False,
            "edge": True,
            "top": {"alice": 2},
            "fan_out": {"avg": 1.0, "max": 1},
            "fan_in": {"avg": 2.0, "max": 2},
        },
        "references": {
            "count": 1,
            "distinct": 2,
            "unique": 2,
            "coverage": 0.167,
            "categorical": False,
            "edge": True,
            "top": {"a": 1, "b": 1},
            "fan_out": {"avg": 2.0, "max": 2},
            "fan_in": {"avg": 1.0, "max": 1},
        },
    }
    # most held first, equal counts by value
    assert list(got["tags"]["status"]["top"]) == ["open", "done"]
    assert list(got["tags"]["topic"]["top"]) == ["auth", "db", "ui"]
    assert got["dates"]["created"] == {
        "min": "2023-01-05",
        "max": "2024-07-04",
        "annual": {"2024": 3, "2023": 3},
        "monthly": {"2024-03": 2, "2023-01": 2, "2024-07": 1, "2023-02": 1},
        "daily": {
            "2024-03-01": 2,
            "2024-07-04": 1,
            "2023-02-10": 1,
            "2023-01-06": 1,
            "2023-01-05": 1,
        },
    }
    assert list(got["dates"]["created"]["annual"]) == ["2024", "2023"]
    assert next(iter(got["dates"]["created"]["daily"])) == "2024-03-01"
    assert got["dates"]["updated"] == {
        "min": "2024-05-01",
        "max": "2024-05-01",
        "annual": {"2024": 6},
        "monthly": {"2024-05": 6},
        "daily": {"2024-05-01": 6},
    }
    assert got["dates"]["accessed"]["daily"] == {"2024-05-02": 6}
    assert got["structure"] == {
        "sources": {"inline": 5, "auto-vivify": 1},
        "with_versions": 2,
        "versions_len": {"1": 1, "2": 1},
        "with_parts": 2,
        "parts_len": {"1": 1, "3": 1},
        "edges": {
            "forward": {"references": 2, "speaker": 2},
            "inverse": {"referenced_by": 2, "said": 2},
            "distinct_sources": 3,
            "distinct_targets": 3,
        },
    }


async def test_top_k_bounds_keys_values_and_periods(db, alpha) -> None:
    got = await profile_of(db, alpha, top_k=2)
    assert list(got["tags"]) == ["status", "topic"]
    assert got["tags"]["topic"]["top"] == {"auth": 2, "db": 2}
    assert got["tags"]["topic"]["distinct"] == 3  # counted over every value
    assert got["all_tags"] == ["status", "topic", "speaker", "references"]
    assert got["dates"]["created"]["daily"] == {"2024-03-01": 2, "2024-07-04": 1}
    assert got["dates"]["created"]["monthly"] == {"2024-03": 2, "2023-01": 2}
    for bad in (0, -1, 1001, "10", True):
        with pytest.raises(BadRequest):
            await profile_of(db, alpha, top_k=bad)


async def test_other_project_counts_only_its_own(db, alpha, tenant) -> None:
    beta = await project_scope(db, tenant, "beta")
    got = await profile_of(db, beta)
    assert got["total"] == 2  # x and bob's stub
    assert got["all_tags"] == ["speaker", "topic"]
    assert got["tags"]["topic"]["top"] == {"other": 1}
    assert got["structure"]["versions_len"] == {"1": 1}
    assert got["structure"]["edges"]["forward"] == {"speaker": 1}
    assert got["structure"]["with_parts"] == 0


async def test_empty_project_has_an_empty_profile(client, db, tenant) -> None:
    # a project is made (and seeded with its schema docs) by its first request
    r = await client.get("/v1/notes", headers=tenant.project("empty"))
    assert r.status_code == 200, r.text
    scope = await project_scope(db, tenant, "empty")
    assert await profile_of(db, scope) == {"total": 0, "tags": {}, "dates": {}, "structure": {}}
