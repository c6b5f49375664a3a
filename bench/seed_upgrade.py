"""What ``keepmem up`` / ``keepmem migrate`` spend writing keep's schema docs
into existing projects when every project already holds them (every start
after the first): the walk over every project that issues one insert each
(keepmem before 2026-11-27) against ``seed_every_project``, which first asks
which projects lack a doc. A throwaway embedded PostgreSQL with ``--projects``
tenants (one project each); the two alternate over ``--rounds``.

    .venv/bin/python -m bench.seed_upgrade [--projects 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from app import tenancy
from app.accounts import service as accounts
from app.cli import migrate
from app.cli.embedded import EmbeddedPostgres
from app.db import Database
from app.notes import service as notes_service
from app.tenancy import scope_for_project, tenant_for_admin
from app.tenants import service as tenants

SECRET = "bench-secret-" + "x" * 32


async def _walk_every_project(db: Database) -> int:
    """The earlier upgrade: every tenant's projects, one seeding insert each."""
    written = 0
    async with tenancy.system_transaction(db) as session:
        for tenant in await tenants.list_tenants(session):
            for project in await tenants.list_projects(session, tenant_for_admin(tenant.id)):
                scope = scope_for_project(project.tenant_id, project.id, project.slug)
                written += await notes_service.seed_system_docs(session, scope, backfill=True)
    return written


async def _seed(db: Database) -> int:
    async with tenancy.system_transaction(db) as session:
        return await accounts.seed_every_project(session)


async def _run(url: str, projects: int, rounds: int) -> None:
    db = Database(url)
    try:
        for i in range(projects):
            async with tenancy.system_transaction(db) as session:
                await accounts.create_tenant(session, name=f"bench-{i}", server_secret=SECRET)
        times: dict[str, list[float]] = {"walk": [], "seed_every_project": []}
        for _ in range(rounds):
            for name, step in (("walk", _walk_every_project), ("seed_every_project", _seed)):
                began = time.perf_counter()
                written = await step(db)
                times[name].append(time.perf_counter() - began)
                assert written == 0, f"{name} wrote {written} docs into up-to-date projects"
        for name, seconds in times.items():
            print(
                f"{name}: {projects} projects, median {statistics.median(seconds):.3f} s "
                f"(min {min(seconds):.3f}, max {max(seconds):.3f})"
            )
        ratio = statistics.median(times["walk"]) / statistics.median(times["seed_every_project"])
        print(f"walk / seed_every_project: {ratio:.0f}x")
    finally:
        await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="seed-upgrade-") as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        pg.start()
        try:
            pg.ensure_login_role("keepmem_app")
            migrate.upgrade(pg.url("postgres"), "keepmem_app")
            asyncio.run(_run(pg.url("keepmem_app"), args.projects, args.rounds))
        finally:
            pg.stop()


if __name__ == "__main__":
    main()
