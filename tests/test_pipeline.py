"""The background pipeline on real Postgres: each job kind run by the runner,
retries and dead letters, superseding, dedup, fairness and the jobs API."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx
from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.jobs import repository as jobs_repo
from app.jobs.kinds import Lane
from app.pipeline import dispatcher, runner
from app.providers.summarization.base import registry as summarizers
from tests.conftest import Tenant
from tests.vendors import Vendor, VendorServer

LONG = (
    "Caroline went to the LGBTQ support group on Tuesday and found it moving. "
    "She met people who had walked the same road and heard their stories. "
    "Afterwards she talked with Melanie about adopting a child on her own. "
    "Melanie painted a sunrise over the lake last year and wants to paint again. "
) * 4


async def put(client: httpx.AsyncClient, t: Tenant, **body: object) -> dict:
    r = await client.post("/v1/notes", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def jobs_of(client, t: Tenant, **params: object) -> list[dict]:
    r = await client.get("/v1/jobs", params=params, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()["jobs"]


async def seq(db: Database, t: Tenant, public_id: str) -> int:
    """The row id a worker is handed for the job the API shows as ``public_id``."""
    async with tenancy.tenant_id_transaction(db, t.id) as s:
        found = await s.scalar(
            text("SELECT id FROM jobs WHERE tenant_id = :t AND public_id = :p"),
            {"t": t.id, "p": public_id},
        )
    assert found is not None, public_id
    return int(found)


async def run_job(pipeline, t: Tenant, public_id: str) -> str:
    return await runner.run(pipeline, t.id, await seq(pipeline.db, t, public_id))


async def run_all(pipeline, client, t: Tenant, note_id: str | None = None) -> list[str]:
    """Run every pending job of the tenant (oldest first), as a worker would."""
    outcomes = []
    params = {"status": "pending"} | ({"note_id": note_id} if note_id else {})
    for job in reversed(await jobs_of(client, t, **params)):
        outcomes.append(await run_job(pipeline, t, job["id"]))
    return outcomes


def path(note_id: str) -> str:
    return "/v1/notes/" + quote(note_id, safe="")


async def test_long_note_is_summarised_embedded_and_content_let_go(
    client, tenant, make_pipeline, db: Database
) -> None:
    note = await put(client, tenant, content=LONG, id="diary")
    assert note["summary"].endswith("...")
    assert set(note["pending"]) == {"embed", "summarize", "extract_graph"}
    assert await run_all(make_pipeline(), client, tenant) == ["done", "done", "done"]
    got = (await client.get(path("diary"), headers=tenant.headers)).json()
    assert got["pending"] == []
    assert not got["summary"].endswith("...")
    assert got["summary"] in LONG.replace("  ", " ") or got["summary"].split(". ")[0] in LONG
    assert got["tags"]["_summarized_hash"]
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        row = (
            await s.execute(
                text(
                    "SELECT n.pending_content, e.model, e.dim FROM notes n JOIN embeddings e "
                    "ON e.note_id = n.id AND e.kind = 'note' WHERE n.id = 'diary'"
                )
            )
        ).one()
    assert row.pending_content is None  # original content not kept past the work
    assert (row.model, row.dim) == ("local:all-MiniLM-L6-v2", 384)
    done = await jobs_of(client, tenant, status="done")
    assert {j["kind"] for j in done} == {"embed", "summarize", "extract_graph"}
    assert all(j["attempts"] == 1 for j in done)


async def test_semantic_search_finds_meaning_without_shared_words(
    client, tenant, make_pipeline
) -> None:
    await put(client, tenant, content="The puppy chewed my favourite sneakers.", id="dog")
    await put(client, tenant, content="Quarterly revenue rose eight percent.", id="money")
    await put(client, tenant, content="Heavy rain flooded the mountain road.", id="storm")
    r = await client.post(
        "/v1/search", json={"query": "young canine destroyed footwear"}, headers=tenant.headers
    )
    assert r.json()["notes"] == [] and r.json()["pending_embedding"] == 3
    await run_all(make_pipeline(), client, tenant)
    r = await client.post(
        "/v1/search",
        json={"query": "young canine destroyed footwear", "limit": 3},
        headers=tenant.headers,
    )
    body = r.json()
    assert body["pending_embedding"] == 0
    assert body["notes"][0]["id"] == "dog"
    assert body["notes"][0]["score"] > body["notes"][1]["score"]
    r = await client.post(
        "/v1/search", json={"query": "company earnings grew"}, headers=tenant.headers
    )
    assert r.json()["notes"][0]["id"] == "money"


async def test_search_is_tenant_isolated(client, tenant, other_tenant, make_pipeline) -> None:
    await put(client, tenant, content="Secret launch codes for the rocket.", id="secret")
    await run_all(make_pipeline(), client, tenant)
    r = await client.post(
        "/v1/search", json={"query": "rocket launch"}, headers=other_tenant.headers
    )
    assert r.json()["notes"] == []


async def test_newer_put_supersedes_older_work(client, tenant, make_pipeline) -> None:
    await put(client, tenant, content=LONG, id="x")
    first = {j["kind"]: j["id"] for j in await jobs_of(client, tenant)}
    await put(client, tenant, content=LONG + " And one more thing.", id="x")
    superseded = await jobs_of(client, tenant, status="superseded")
    assert {j["id"] for j in superseded} == set(first.values())
    # a worker already holding the old job applies nothing once the content moved on
    async with tenancy.tenant_id_transaction(make_pipeline().db, tenant.id) as s:
        await s.execute(
            text("UPDATE jobs SET status = 'dispatched' WHERE public_id = :i"),
            {"i": first["summarize"]},
        )
    assert await run_job(make_pipeline(), tenant, first["summarize"]) == "done"
    job = (await client.get(f"/v1/jobs/{first['summarize']}", headers=tenant.headers)).json()
    assert job["result"] == {"skipped": "superseded"}
    await run_all(make_pipeline(), client, tenant)
    got = (await client.get(path("x"), headers=tenant.headers)).json()
    assert got["pending"] == []


async def test_identical_content_reuses_the_vector(client, tenant, make_pipeline) -> None:
    await put(client, tenant, content="Same words in two notes.", id="a")
    await put(client, tenant, content="Same words in two notes.", id="b")
    await run_all(make_pipeline(), client, tenant)
    done = list(reversed(await jobs_of(client, tenant, kind="embed")))  # oldest first
    assert [j["result"]["reused"] for j in done] == [False, True]


async def test_transient_failure_retries_with_backoff_then_dead_letters(
    client, tenant, make_pipeline
) -> None:
    with VendorServer(Vendor(fail_status=503, fail_times=-1)) as server:
        llm = summarizers.create("openai", model="m", base_url=server.url + "/v1")
        pipeline = make_pipeline(summarizer=llm)
        await put(client, tenant, content=LONG, id="flaky")
        job = next(j for j in await jobs_of(client, tenant) if j["kind"] == "summarize")
        assert await run_job(pipeline, tenant, job["id"]) == "retry"
        after = (await client.get(f"/v1/jobs/{job['id']}", headers=tenant.headers)).json()
        assert after["status"] == "pending" and after["attempts"] == 1
        assert "503" in after["last_error"]
        for attempt in range(2, 6):
            async with tenancy.tenant_id_transaction(pipeline.db, tenant.id) as s:
                wait = (
                    await s.execute(
                        text(
                            "SELECT extract(epoch FROM next_run_at - updated_at) "
                            "FROM jobs WHERE public_id = :i"
                        ),
                        {"i": job["id"]},
                    )
                ).scalar_one()
                assert abs(float(wait) - runner.backoff(pipeline.settings, attempt - 1)) < 2
                await s.execute(
                    text("UPDATE jobs SET next_run_at = now() WHERE public_id = :i"),
                    {"i": job["id"]},
                )
            outcome = await run_job(pipeline, tenant, job["id"])
            assert outcome == ("dead" if attempt == 5 else "retry")
        dead = (await client.get(f"/v1/jobs/{job['id']}", headers=tenant.headers)).json()
        assert dead["status"] == "dead" and dead["attempts"] == 5 and dead["dead_lettered_at"]
        await llm.aclose()
    # the note kept its placeholder and is still readable
    assert (
        (await client.get(path("flaky"), headers=tenant.headers)).json()["summary"].endswith("...")
    )
    # a dead job can be retried by hand; a live one cannot
    r = await client.post(f"/v1/jobs/{job['id']}/retry", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["status"] == "pending" and r.json()["attempts"] == 0
    r = await client.post(f"/v1/jobs/{job['id']}/retry", headers=tenant.headers)
    assert r.status_code == 409
    assert await run_job(make_pipeline(), tenant, job["id"]) == "done"


def test_backoff_schedule(settings) -> None:
    assert [runner.backoff(settings, a) for a in (1, 2, 3, 7, 8, 20)] == [
        30,
        60,
        120,
        1920,
        3600,
        3600,
    ]


async def test_permanent_failure_dead_letters_at_once(client, tenant, make_pipeline) -> None:
    with VendorServer(Vendor(fail_status=400, fail_times=-1)) as server:
        llm = summarizers.create("anthropic", model="m", base_url=server.url)
        await put(client, tenant, content=LONG, id="bad")
        job = next(j for j in await jobs_of(client, tenant) if j["kind"] == "summarize")
        assert await run_job(make_pipeline(summarizer=llm), tenant, job["id"]) == "dead"
        await llm.aclose()
    got = (await client.get(f"/v1/jobs/{job['id']}", headers=tenant.headers)).json()
    assert got["attempts"] == 1 and "400" in got["last_error"]


async def test_analyze_splits_into_searchable_parts(client, tenant, make_pipeline) -> None:
    doc = "\n\n".join(
        f"# Section {i}\n\n" + f"Paragraph about topic {i} with enough words to matter. " * 12
        for i in range(3)
    )
    note = await put(client, tenant, content=doc, id="doc", analyze=True)
    assert "analyze" in note["pending"]
    await run_all(make_pipeline(part_target_chars=900), client, tenant)
    parts = (await client.get(path("doc") + "/parts", headers=tenant.headers)).json()
    assert parts["count"] == 3
    assert parts["parts"][0]["id"] == "doc@P{1}"
    part = (await client.get(path("doc@P{2}"), headers=tenant.headers)).json()
    assert "topic 1" in part["summary"] and part["tags"]["_part_num"] == "2"
    # re-analysis later needs the content sent along: it is no longer held
    r = await client.post(path("doc") + "/analyze", headers=tenant.headers)
    assert r.status_code == 409 and "content" in r.json()["error"]
    r = await client.post(
        path("doc") + "/analyze", json={"content": doc[:1500]}, headers=tenant.headers
    )
    assert r.status_code == 202
    await run_all(make_pipeline(part_target_chars=900), client, tenant)
    parts = (await client.get(path("doc") + "/parts", headers=tenant.headers)).json()
    assert parts["count"] == 2
    job = (await jobs_of(client, tenant, kind="analyze"))[0]
    assert job["status"] == "done"


async def test_analyze_too_short_is_a_permanent_error(client, tenant, make_pipeline) -> None:
    await put(client, tenant, content="tiny", id="tiny", analyze=True)
    outcomes = await run_all(make_pipeline(), client, tenant)
    assert "dead" in outcomes
    dead = await jobs_of(client, tenant, status="dead")
    assert dead[0]["kind"] == "analyze" and "too short" in dead[0]["last_error"]


async def test_tag_change_requeues_summary_when_content_is_held(
    client, tenant, make_pipeline
) -> None:
    with VendorServer(Vendor(summary="First LLM summary.")) as server:
        llm = summarizers.create("openai", model="m", base_url=server.url + "/v1")
        pipeline = make_pipeline(summarizer=llm)
        await put(client, tenant, content=LONG, id="ctx", tags={"topic": "family"})
        await put(
            client,
            tenant,
            content="Melanie loves painting lakes.",
            id="rel",
            tags={"topic": "family"},
        )
        await run_all(pipeline, client, tenant)
        assert (await client.get(path("ctx"), headers=tenant.headers)).json()["summary"] == (
            "First LLM summary."
        )
        server.vendor.summary = "Second LLM summary."
        r = await client.patch(
            path("ctx") + "/tags", json={"set": {"person": "caroline"}}, headers=tenant.headers
        )
        assert r.json()["pending"] == ["summarize"]
        assert r.json()["summary"] == "First LLM summary."  # old one stays meanwhile
        await run_all(pipeline, client, tenant)
        assert (await client.get(path("ctx"), headers=tenant.headers)).json()["summary"] == (
            "Second LLM summary."
        )
        # the related note sharing the tag was given as context
        last = server.vendor.requests[-1]["body"]["messages"][1]["content"]
        assert "[rel] Melanie loves painting lakes." in last
        await llm.aclose()


async def test_task_delegation_api(client, tenant, other_tenant, make_pipeline) -> None:
    r = await client.get("/v1/processors", headers=tenant.headers)
    assert {"task_type": "summarize"} in r.json()["processors"]
    r = await client.post(
        "/v1/tasks",
        json={
            "task_type": "summarize",
            "content": LONG,
            "action": {"name": "summarize", "params": {"item_id": "n1"}},
        },
        headers=tenant.headers,
    )
    task_id = r.json()["task_id"]
    r = await client.get(f"/v1/tasks/{task_id}", headers=tenant.headers)
    assert r.json()["status"] == "queued"
    assert (
        await client.get(f"/v1/tasks/{task_id}", headers=other_tenant.headers)
    ).status_code == 404
    assert await run_job(make_pipeline(), tenant, task_id) == "done"
    body = (await client.get(f"/v1/tasks/{task_id}", headers=tenant.headers)).json()
    assert body["status"] == "completed" and body["output"]["summary"]
    assert (await client.delete(f"/v1/tasks/{task_id}", headers=tenant.headers)).status_code == 204
    assert (await client.get(f"/v1/tasks/{task_id}", headers=tenant.headers)).status_code == 404
    r = await client.post(
        "/v1/tasks", json={"task_type": "ocr", "content": "x"}, headers=tenant.headers
    )
    assert r.status_code == 400


async def test_jobs_api_filters_and_isolation(client, tenant, other_tenant) -> None:
    await put(client, tenant, content=LONG, id="j1")
    all_jobs = await jobs_of(client, tenant)
    assert {j["kind"] for j in all_jobs} == {"embed", "summarize", "extract_graph"}
    assert [j["kind"] for j in await jobs_of(client, tenant, kind="embed")] == ["embed"]
    assert len(await jobs_of(client, tenant, note_id="j1")) == 3
    assert await jobs_of(client, other_tenant) == []
    r = await client.get(f"/v1/jobs/{all_jobs[0]['id']}", headers=other_tenant.headers)
    assert r.status_code == 404
    for params in ({"status": "weird"}, {"kind": "weird"}):
        r = await client.get("/v1/jobs", params=params, headers=tenant.headers)
        assert r.status_code == 400
    assert (await client.get("/v1/jobs")).status_code == 401


async def test_fair_dispatch_does_not_starve_a_small_tenant(fresh_database, settings) -> None:
    db = Database(fresh_database.app_url)
    big, small = uuid.uuid4(), uuid.uuid4()
    try:
        async with tenancy.system_transaction(db) as s:
            for tenant_id, n in ((big, 2000), (small, 1)):
                await s.execute(
                    text("INSERT INTO tenants (id, name) VALUES (:t, :n)"),
                    {"t": tenant_id, "n": str(tenant_id)},
                )
                await s.execute(
                    text("INSERT INTO projects (tenant_id, id, slug) VALUES (:t, :t, 'default')"),
                    {"t": tenant_id},
                )
                await s.execute(
                    text(
                        "INSERT INTO jobs (tenant_id, project_id, kind, note_id) "
                        "SELECT :t, :t, 'embed', 'n' || g FROM generate_series(1, :n) g"
                    ),
                    {"t": tenant_id, "n": n},
                )
        async with tenancy.system_transaction(db) as s:
            taken = await jobs_repo.take_ready_fairly(s, slots=4)
        assert len(taken) == 4
        assert small in {j.tenant_id for j in taken}
        assert taken[0].tenant_id != taken[1].tenant_id  # interleaved
        # A backlog of background work (graph extraction) cannot fill the
        # workers' queue ahead of the next embedding.
        async with tenancy.system_transaction(db) as s:
            await s.execute(
                text(
                    "INSERT INTO jobs (tenant_id, project_id, kind, note_id, priority) "
                    "SELECT :t, :t, 'extract_graph', 'g' || g, 9 FROM generate_series(1, 50) g"
                ),
                {"t": small},
            )
        async with tenancy.system_transaction(db) as s:
            three = {Lane.BACKGROUND: jobs_repo.LaneCap(total=3, per_tenant=3)}
            taken = await jobs_repo.take_ready_fairly(s, slots=60, caps=three)
        kinds = [j.kind for j in taken if j.tenant_id == small]
        assert kinds.count("extract_graph") == 3 and kinds.count("embed") == 1
        # the small tenant's embed and 3 of its 50 graph jobs (the other 47 stay
        # pending); the slots they leave go to the big tenant's embeddings
        assert len(taken) == 60
        assert [j.kind for j in taken if j.tenant_id == big] == ["embed"] * 56
    finally:
        await db.dispose()


async def test_reconcile_queues_reindex_for_notes_without_current_vectors(
    client, tenant, make_pipeline, db
) -> None:
    await put(client, tenant, content="A note embedded by an old model.", id="old")
    await run_all(make_pipeline(), client, tenant)
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(text("UPDATE embeddings SET model = 'retired:model' WHERE note_id = 'old'"))
    queued = await dispatcher.reconcile(make_pipeline(), limit=100_000)
    assert queued >= 1
    reindex = await jobs_of(client, tenant, kind="reindex")
    assert [j["note_id"] for j in reindex] == ["old"]
    await run_all(make_pipeline(), client, tenant)
    r = await client.post("/v1/search", json={"query": "old model note"}, headers=tenant.headers)
    assert r.json()["notes"][0]["id"] == "old"


async def _vector_rows(db, tenant, note_id: str) -> list[tuple[str, int]]:
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        rows = await s.execute(
            text("SELECT kind, ref FROM embeddings WHERE note_id = :n ORDER BY kind, ref"),
            {"n": note_id},
        )
        return [(r[0], r[1]) for r in rows]


async def test_versions_keep_their_vectors_through_revert_and_move(
    client, tenant, make_pipeline, db
) -> None:
    pipeline = make_pipeline()
    await put(client, tenant, content="Cats sleep for most of the day.", id="pet")
    await run_all(pipeline, client, tenant)
    await put(client, tenant, content="Quarterly taxes are due in April.", id="pet")
    await run_all(pipeline, client, tenant)
    assert await _vector_rows(db, tenant, "pet") == [("note", 0), ("version", 1)]
    r = await client.delete(
        path("pet"), params={"delete_versions": "false"}, headers=tenant.headers
    )
    assert r.json()["reverted"] is True
    assert await _vector_rows(db, tenant, "pet") == [("note", 0)]
    found = await client.post(
        "/v1/search", json={"query": "sleepy kittens"}, headers=tenant.headers
    )
    assert found.json()["notes"][0]["id"] == "pet"

    await put(client, tenant, content="The boat leaves at dawn.", id="src")
    await run_all(pipeline, client, tenant)
    await put(client, tenant, content="Bring sunscreen and water.", id="src")
    await run_all(pipeline, client, tenant)
    r = await client.post(
        "/v1/move",
        json={"name": "dest", "source": "src", "only_current": True},
        headers=tenant.headers,
    )
    assert r.status_code == 200
    # the source is back to its first text, with that text's vector as its own
    assert await _vector_rows(db, tenant, "src") == [("note", 0)]
    found = await client.post(
        "/v1/search", json={"query": "ship departs early morning"}, headers=tenant.headers
    )
    assert found.json()["notes"][0]["id"] == "src"
