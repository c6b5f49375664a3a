"""The paths find takes for speed at scale (bench/search.py measures them):
BM25 scored set-based in SQL, the cap on scored matches, the one opening
statement, cosines and timeline neighbours folded into other statements, and
tenants kept apart on all of them."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app import tenancy
from app.search import repository as repo
from app.search.fulltext import repository as fulltext
from app.tenancy import scope_for_job
from tests.test_pipeline import put, run_all
from tests.test_search import find, ids

WORDS = "amber basalt cobalt dune ember fjord glacier harbor island jungle".split()


async def _scope(db, tenant):
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        project = (
            await s.execute(text("SELECT id FROM projects WHERE tenant_id = :t"), {"t": tenant.id})
        ).scalar_one()
    return scope_for_job(tenant.id, project)


async def _stage(db, tenant, query, *, exact=False, limit=100):
    scope = await _scope(db, tenant)
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        terms = await fulltext.read_question(s, scope, query)
        assert terms is not None
        stage = await fulltext.full_text(
            s, scope, terms, kinds=["note"], filters=repo.Filters(), limit=limit, exact=exact
        )
        # The reference: migration 0005's per-row function, same weights.
        lexemes = sorted({x for g in terms.groups for x in g})
        reference = dict(
            (
                await s.execute(
                    text(
                        "SELECT id, keepmem_bm25(fts, :lex, :idf, :avgdl) FROM notes "
                        "WHERE tenant_id = :t"
                    ),
                    {
                        "lex": lexemes,
                        "idf": [terms.idf(x) for x in lexemes],
                        "avgdl": terms.avgdl,
                        "t": tenant.id,
                    },
                )
            ).all()
        )
    return stage, reference


async def test_set_based_bm25_equals_the_per_row_function(client, tenant, db) -> None:
    for i in range(12):
        words = " ".join(WORDS[j % len(WORDS)] for j in range(i, i + 3 + i % 4))
        await put(client, tenant, id=f"n{i}", content=f"{words} {words if i % 3 else ''} end")
    stage, reference = await _stage(db, tenant, "cobalt glacier harbor")
    assert stage.exact and stage.scored == len(stage.hits) > 3
    for hit in stage.hits:  # term frequency and length count exactly as before
        assert hit.score == pytest.approx(reference[hit.note_id], rel=1e-9)
    scores = [h.score for h in stage.hits]
    assert scores == sorted(scores, reverse=True)


def _same_top(fast, full, top: int) -> None:
    """The first ``top`` hits of both are equally good: the same scores in
    order, and the same notes above the last score (a tie there may be
    broken either way). Scores are compared to nine places: the statements
    may sum a note's words in another order (another plan), which moves the
    last bits of a float."""
    scores = [round(h.score, 9) for h in fast.hits[:top]]
    assert scores == [round(h.score, 9) for h in full.hits[:top]]
    if scores:
        above = [
            {h.note_id for h in s.hits[:top] if round(h.score, 9) > scores[-1]}
            for s in (fast, full)
        ]
        assert above[0] == above[1]


async def test_max_score_leaves_out_what_cannot_win_and_keeps_exact_bm25(
    client, tenant, db, monkeypatch
) -> None:
    """Past SCORE_AT_ONCE matches, the notes that hold only words whose most
    BM25 cannot lift them into the top are never scored; the top is exact
    BM25's all the same (ids and scores, in order)."""
    for i in range(40):
        await put(client, tenant, id=f"common-{i:02d}", content=f"amber basalt note {i}")
    for i in range(12):
        extra = " fjord" * (i % 3) + " glacier" * (i % 2)
        await put(client, tenant, id=f"rare-{i:02d}", content=f"fjord trip {i}{extra}")
    for i in range(6):
        await put(client, tenant, id=f"ice-{i}", content=f"glacier walk {i} amber")
    monkeypatch.setattr(fulltext, "SCORE_AT_ONCE", 3)
    for query in ("amber fjord glacier", "amber basalt fjord", "glacier amber"):
        fast, reference = await _stage(db, tenant, query, limit=5)
        full, _ = await _stage(db, tenant, query, limit=5, exact=True)
        assert fast.exact
        _same_top(fast, full, 5)
        best = sorted(reference.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        assert [h.note_id for h in full.hits] == [k for k, _ in best]
    # "amber" is in most notes (its idf is floored): it produces no candidates
    fast, _ = await _stage(db, tenant, "amber fjord glacier", limit=5)
    full, _ = await _stage(db, tenant, "amber fjord glacier", limit=5, exact=True)
    assert fast.scored < full.scored == 58


async def test_max_score_equals_exact_bm25_on_random_notes(client, tenant, db, monkeypatch) -> None:
    """Words of every rarity, repeated, in notes of every length: MaxScore's
    top equals scoring every match, question after question."""
    import random

    rng = random.Random(36)
    vocab = [*WORDS, *(f"w{i}" for i in range(30))]
    weights = [30, 25, 20, 15, 10, 8, 6, 5, 4, 3] + [2] * 30
    for i in range(80):
        words = rng.choices(vocab, weights=weights, k=rng.randint(2, 14))
        await put(client, tenant, id=f"n{i:02d}", content=" ".join(words))
    monkeypatch.setattr(fulltext, "SCORE_AT_ONCE", 6)
    for _ in range(15):
        query = " ".join(rng.sample(vocab, rng.randint(2, 6)))
        for limit in (3, 10, 30):
            fast, _ = await _stage(db, tenant, query, limit=limit)
            full, _ = await _stage(db, tenant, query, limit=limit, exact=True)
            # exact to the EXACT_TOP-th hit; past it, the best of what was scored
            _same_top(fast, full, min(limit, fulltext.EXACT_TOP))


async def test_same_ids_in_two_tenants_stay_apart_on_every_path(
    client, tenant, other_tenant, make_pipeline
) -> None:
    """Same ids, same words: the text stage, the vector stage with the cosines
    of text hits, and the timeline neighbours must each read only the
    asker's rows."""
    for t, marker in ((tenant, "mine"), (other_tenant, "theirs")):
        for i in range(6):
            await put(
                client,
                t,
                id=f"turn-{i}",
                content=f"{marker} {WORDS[i]} harbor meeting about the glacier trip {i}",
                created_at=f"2023-05-08T13:0{i}:00",
            )
        await run_all(make_pipeline(), client, t)
    for t, marker in ((tenant, "mine"), (other_tenant, "theirs")):
        for stages in ("hybrid", "text", "vector"):
            body = await find(client, t, query="glacier harbor cobalt", stages=stages)
            assert len(ids(body)) == 6
            assert all(n["summary"].startswith(marker) for n in body["notes"]), body


async def test_the_opening_statement_sets_the_plan_for_the_find(client, tenant, db) -> None:
    await put(client, tenant, id="a", content="one note")
    scope = await _scope(db, tenant)
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        opening = await repo.open_find(s, scope, model="m", candidates=500)
        settings = dict(
            (
                await s.execute(
                    text(
                        "SELECT name, setting FROM pg_settings WHERE name IN "
                        "('plan_cache_mode', 'enable_sort', 'enable_incremental_sort')"
                    )
                )
            ).all()
        )
        ef = (await s.execute(text("SHOW hnsw.ef_search"))).scalar_one()
    assert opening.vectors == 0 and not opening.big
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        # a project counted as big a moment ago is not counted again
        known = await repo.open_find(s, scope, model="m", candidates=500, known_big=True)
    assert known.big
    assert settings == {
        "plan_cache_mode": "force_custom_plan",
        "enable_sort": "off",
        "enable_incremental_sort": "off",
    }
    assert ef == "500"
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:  # transaction-local
        assert (await s.execute(text("SHOW enable_sort"))).scalar_one() == "on"


async def test_a_tenant_cannot_learn_another_tenants_word_counts(
    client, tenant, other_tenant, db
) -> None:
    for i in range(30):
        await put(client, tenant, id=f"w{i}", content=f"walrus number {i}")
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await fulltext.refresh_term_stats(s, await _scope(db, tenant), min_notes=10)
    await put(client, other_tenant, id="x", content="a walrus")
    scope = await _scope(db, other_tenant)
    async with tenancy.tenant_id_transaction(db, other_tenant.id) as s:
        terms = await fulltext.read_question(s, scope, "walrus")
        own = (
            await s.execute(text("SELECT count(*) FROM notes WHERE left(id, 1) <> '.'"))
        ).scalar_one()
    # Its own counts (its one note: system notes are not counted), none of the
    # first tenant's.
    assert terms is not None and terms.df["walrus"] == 1 and terms.total == own == 1
    assert not terms.common


def test_the_embedded_server_gets_a_quarter_of_the_memory(stack) -> None:
    """Stock shared_buffers (128 MB) held neither a million notes' HNSW index
    nor their text: the embedded stack sizes them to the machine (or its
    container's limit), once, at first start."""
    from app.cli.embedded import _memory_mb, shared_buffers_mb

    got = int(
        stack.pg.psql("SELECT setting::bigint * 8 / 1024 FROM pg_settings "
                      "WHERE name = 'shared_buffers'").strip()
    )  # fmt: skip
    assert got == shared_buffers_mb()  # applied: the server was restarted with it
    assert 128 <= got <= max(_memory_mb() // 2, 128)


def test_the_shared_buffers_override_is_checked(monkeypatch) -> None:
    from app.cli.embedded import EmbeddedError, shared_buffers_mb

    monkeypatch.setenv("KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB", "512")
    assert shared_buffers_mb() == 512
    for bad in ("lots", "-1", "8"):
        monkeypatch.setenv("KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB", bad)
        with pytest.raises(EmbeddedError, match="whole number of MB"):
            shared_buffers_mb()
