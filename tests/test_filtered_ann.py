"""Filtered approximate search stays correct: a small tenant inside a big
shared table gets its true top 10 through the HNSW index, not the few rows
an index scan filtered afterwards would leave."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.search import repository as search
from app.tenancy import scope_for_job
from tests.conftest import FreshDatabase

MODEL = "test:random"


async def _seed(db: Database, tenant: uuid.UUID, n: int) -> None:
    async with tenancy.system_transaction(db) as s:
        await s.execute(
            text("INSERT INTO tenants (id, name) VALUES (:t, :n)"), {"t": tenant, "n": str(tenant)}
        )
        await s.execute(
            text("INSERT INTO projects (tenant_id, id, slug) VALUES (:t, :t, 'default')"),
            {"t": tenant},
        )
        await s.execute(
            text(
                "INSERT INTO notes (tenant_id, project_id, id, summary, created_at, updated_at, "
                "accessed_at) SELECT :t, :t, 'n' || g, 'note ' || g, now(), now(), now() "
                "FROM generate_series(1, :n) g"
            ),
            {"t": tenant, "n": n},
        )
        await s.execute(
            text(
                "INSERT INTO embeddings (tenant_id, project_id, note_id, kind, ref, model, dim, "
                "embedding) SELECT :t, :t, 'n' || g, 'note', 0, :m, 384, v.vec "
                "FROM generate_series(1, :n) g, LATERAL ("
                "  SELECT array_agg(random() - 0.5 + x * 0 + g * 0)::vector(384) AS vec "
                "  FROM generate_series(1, 384) x) v"
            ),
            {"t": tenant, "n": n, "m": MODEL},
        )


async def test_small_tenant_gets_its_full_exact_top_10_through_the_index(
    fresh_database: FreshDatabase,
) -> None:
    db = Database(fresh_database.app_url)
    owner = Database(fresh_database.owner_url)
    big, small = uuid.uuid4(), uuid.uuid4()
    try:
        await _seed(db, big, 3000)
        await _seed(db, small, 30)  # 1 % of the table
        async with owner.transaction() as s:
            await s.execute(text("ANALYZE embeddings"))
        scope = scope_for_job(small, small)
        query = [((i * 37) % 11 - 5) / 5 for i in range(384)]
        async with tenancy.tenant_id_transaction(db, small) as s:
            exact = (
                (
                    await s.execute(
                        text(
                            "SELECT note_id FROM embeddings WHERE tenant_id = :t "
                            "ORDER BY embedding::vector(384) <=> CAST(:q AS vector(384)) LIMIT 10"
                        ),
                        {"t": small, "q": str(query)},
                    )
                )
                .scalars()
                .all()
            )
        async with owner.transaction() as s:
            before = (
                await s.execute(
                    text(
                        "SELECT idx_scan FROM pg_stat_user_indexes "
                        "WHERE indexrelname = 'ix_embeddings_hnsw_384'"
                    )
                )
            ).scalar_one()
        async with tenancy.tenant_id_transaction(db, small) as s:
            # find's own planner settings (iterative scan, ef_search) ...
            await search.open_find(s, scope, model=MODEL, candidates=10)
            # ... and the planner made to take the HNSW index, the path that starves results.
            await s.execute(text("SET LOCAL enable_seqscan = off"))
            await s.execute(text("SET LOCAL enable_bitmapscan = off"))
            await s.execute(text("SET LOCAL enable_sort = off"))
            hits, _ = await search.semantic(
                s,
                scope,
                vector=query,
                model=MODEL,
                kinds=["note"],
                filters=search.Filters(include_hidden=True),
                limit=10,
                big=True,
            )
            # Publish this backend's index statistics when it commits.
            await s.execute(text("SELECT pg_stat_force_next_flush()"))
        async with owner.transaction() as s:
            after = (
                await s.execute(
                    text(
                        "SELECT idx_scan FROM pg_stat_user_indexes "
                        "WHERE indexrelname = 'ix_embeddings_hnsw_384'"
                    )
                )
            ).scalar_one()
        assert [h.note_id for h in hits] == list(exact)  # recall@10 = 1.0, same order
        assert len(hits) == 10
        assert after > before  # the HNSW index really served the query
    finally:
        await db.dispose()
        await owner.dispose()
