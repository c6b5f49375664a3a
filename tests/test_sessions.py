"""Sessions over the API with the real worker code: intake, cleaning,
previews, the digest (observations, patterns, checkpoints, tasks), resume
blocks, opt-outs, collections, bad input and tenant isolation."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app import tenancy
from tests.conftest import Tenant
from tests.test_pipeline import run_all, run_job

AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
OPENAI = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5"


def ev(sid: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"platform": "claude-code", "session_id": sid, "kind": kind, **fields}


async def send(client: httpx.AsyncClient, t: Tenant, *events: dict[str, Any]) -> dict[str, Any]:
    r = await client.post("/v1/sessions/events", json={"events": list(events)}, headers=t.headers)
    assert r.status_code == 202, r.text
    return r.json()


async def digest(make_pipeline, client, t: Tenant) -> None:
    """Run the tenant's pending jobs (embeddings, digests) as a worker would."""
    pipeline = make_pipeline()
    for _ in range(3):  # a digest may queue the next batch
        if not await run_all(pipeline, client, t):
            break


def failing_test(sid: str, n: int, line: int) -> dict[str, Any]:
    return ev(
        sid,
        "tool_failure",
        cwd="/home/dev/shop",
        tool_name="Bash",
        tool_input={"command": "pytest tests/test_cart.py"},
        error=f"AssertionError: expected {n} items, got {n - 1} in tests/test_cart.py:{line}",
    )


async def test_events_become_notes_without_secrets(client, tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    out = await send(
        client,
        tenant,
        ev(sid, "session_start", cwd="/home/dev/shop", source="startup"),
        ev(sid, "prompt", prompt="Fix the cart <private>my card 4111</private> please"),
        ev(sid, "tool_use", tool_name="Read", tool_input={"file_path": "src/cart.py"}),
        ev(
            sid,
            "tool_result",
            tool_name="Bash",
            tool_input={"command": "cat config.py"},
            tool_output=f"key={AWS}\npassword = hunter2-very-secret\n{OPENAI}\n"
            "<system-reminder>You are Claude</system-reminder>done",
        ),
    )
    assert out["accepted"] == 3 and out["dropped"] == 1  # the PreToolUse is noise
    await digest(make_pipeline, client, tenant)  # the worker stores the events as notes
    listed = await client.get(
        "/v1/notes", params={"tag": f"session={sid}", "limit": 50}, headers=tenant.headers
    )
    assert listed.status_code == 200, listed.text
    body = listed.text
    events = [n for n in listed.json()["notes"] if "event" in n["tags"]]
    assert sorted(n["tags"]["event"] for n in events) == ["prompt", "tool_result"]
    for secret in (AWS, "hunter2-very-secret", OPENAI, "4111", "You are Claude"):
        assert secret not in body


async def test_a_long_output_is_kept_as_a_preview(client, tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    big = "\n".join(f"line {i} of the build log" for i in range(9000))
    await send(
        client,
        tenant,
        ev(sid, "tool_result", tool_name="Bash", tool_input={"command": "make"}, tool_output=big),
    )
    await digest(make_pipeline, client, tenant)
    r = await client.get(f"/v1/sessions/{sid}/timeline", headers=tenant.headers)
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    assert item["kind"] == "tool_result"
    assert item["tags"]["output_chars"] == str(len(big))
    assert item["tags"]["output_lines"] == "9000"
    # The head and the tail are searchable; the middle is not stored.
    for words, found in (("17", True), ("8999", True), ("4500", False)):
        r = await client.post(
            "/v1/search",
            json={"query": words, "stages": "text", "tags": {"session": sid}},
            headers=tenant.headers,
        )
        assert r.status_code == 200, r.text
        assert bool(r.json()["notes"]) is found, words


async def test_bad_input_stores_nothing(client, tenant) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    bad = [
        {"events": [ev(sid, "teleport")]},
        {"events": [ev(sid, "prompt", prompt="x")] * 101},
        {"events": []},
        {"events": [{**ev(sid, "prompt"), "extra": 1}]},
        {"events": [ev("a" * 201, "prompt")]},
        {"events": [ev(sid, "prompt", tool_name="x" * 201)]},
        {"events": [ev(sid, "tool_result", original_chars="12")]},
        {"events": [ev(sid, "tool_failure", is_interrupt="yes")]},
        {"events": [ev("a b", "prompt")]},
    ]
    for body in bad:
        r = await client.post("/v1/sessions/events", json=body, headers=tenant.headers)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]
    for at in ("yesterday", "0168-06-02T07:33:16Z"):
        body = {"events": [ev(sid, "prompt", prompt="a"), ev(sid, "prompt", at=at)]}
        r = await client.post("/v1/sessions/events", json=body, headers=tenant.headers)
        assert r.status_code == 400 and "events[1].at" in r.json()["error"], r.text
    r = await client.get(f"/v1/sessions/{sid}", headers=tenant.headers)
    assert r.status_code == 404 and r.json()["code"] == "session_not_found"


async def test_digest_makes_patterns_checkpoints_and_tasks(client, tenant, make_pipeline) -> None:
    sids = [f"s-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for i, sid in enumerate(sids):
        await send(
            client,
            tenant,
            ev(sid, "prompt", cwd="/home/dev/shop", prompt="make the cart tests pass"),
            failing_test(sid, 3 + i, 41 + i),
            ev(
                sid,
                "tool_result",
                tool_name="Bash",
                tool_input={"command": "pytest tests/test_cart.py"},
                tool_output="===== 12 passed in 0.3s =====",
            ),
        )
    summary = (
        "Summary of the work so far.\n\nPending Tasks:\n"
        "- Add a discount code field to checkout\n- Write tests for the refund path\n\n"
        "Decision: use Decimal for all money amounts\n"
    )
    await send(
        client,
        tenant,
        ev(sids[-1], "pre_compact", trigger="auto"),
        ev(sids[-1], "post_compact", trigger="auto", compact_summary=summary),
    )
    await digest(make_pipeline, client, tenant)
    r = await client.get("/v1/sessions/patterns", params={"kind": "error"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    (error,) = r.json()["patterns"]
    assert error["count"] == 3 and error["sessions"] == 3
    assert "<n>" in error["template"] and "tests/test_cart.py" in error["files"]
    r = await client.get(f"/v1/sessions/{sids[-1]}/checkpoints", headers=tenant.headers)
    (cp,) = r.json()["checkpoints"]
    assert cp["trigger"] == "compaction"
    assert "Add a discount code field to checkout" in cp["text"]
    assert "use Decimal for all money amounts" in cp["text"]
    todo = await client.get(
        "/v1/notes",
        params={"tag": ["act=commitment", "status=open"], "limit": 50},
        headers=tenant.headers,
    )
    texts = [n["summary"] for n in todo.json()["notes"]]
    assert "Write tests for the refund path" in texts
    r = await client.get(
        "/v1/sessions/resume", params={"cwd": "/home/dev/shop"}, headers=tenant.headers
    )
    block = r.json()
    assert block["inject"] and 0 < block["chars"] <= 6000
    assert "x3 in 3 session(s)" in block["context"]
    assert "Write tests for the refund path" in block["context"]


async def test_opt_out_injects_nothing(client, tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(client, tenant, failing_test(sid, 3, 41), ev(sid, "session_end", reason="exit"))
    await digest(make_pipeline, client, tenant)
    params = {"cwd": "/home/dev/shop", "session_id": sid}
    before = (await client.get("/v1/sessions/resume", params=params, headers=tenant.headers)).json()
    assert before["context"]
    r = await client.patch(f"/v1/sessions/{sid}", json={"inject": False}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["inject"] is False
    after = (await client.get("/v1/sessions/resume", params=params, headers=tenant.headers)).json()
    assert after == {"context": "", "chars": 0, "inject": False}
    r = await client.put("/v1/sessions/settings", json={"inject": False}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["inject"] is False
    other = (
        await client.get("/v1/sessions/resume", params={"cwd": "/x"}, headers=tenant.headers)
    ).json()
    assert other["context"] == "" and other["inject"] is False


async def test_keepmem_off_in_a_prompt_stops_capture(client, tenant) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    out = await send(client, tenant, ev(sid, "prompt", prompt="[keepmem:off] private work"))
    assert out["sessions"] == [{"session_id": sid, "capture": False}]
    out = await send(client, tenant, ev(sid, "prompt", prompt="secret plans"))
    assert out["accepted"] == 0 and out["dropped"] == 1
    listed = await client.get("/v1/notes", params={"tag": f"session={sid}"}, headers=tenant.headers)
    assert listed.json()["notes"] == []


async def test_another_tenant_sees_none_of_it(client, tenant, other_tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(client, tenant, failing_test(sid, 3, 41), ev(sid, "session_end", reason="exit"))
    await digest(make_pipeline, client, tenant)
    h = other_tenant.headers
    assert (await client.get(f"/v1/sessions/{sid}", headers=h)).status_code == 404
    assert (await client.get(f"/v1/sessions/{sid}/timeline", headers=h)).status_code == 404
    assert (
        await client.post(f"/v1/sessions/{sid}/checkpoint", json={}, headers=h)
    ).status_code == 404
    assert (
        await client.patch(f"/v1/sessions/{sid}", json={"capture": False}, headers=h)
    ).status_code == 404
    assert (await client.get("/v1/sessions", headers=h)).json()["sessions"] == []
    assert (await client.get("/v1/sessions/patterns", headers=h)).json()["patterns"] == []
    resume = (await client.get("/v1/sessions/resume", headers=h)).json()
    assert resume["context"] == ""
    # The same host session id from the other tenant is its own session: never a merge.
    await send(client, other_tenant, ev(sid, "prompt", prompt="hello"))
    mine = (await client.get(f"/v1/sessions/{sid}", headers=tenant.headers)).json()
    theirs = (await client.get(f"/v1/sessions/{sid}", headers=h)).json()
    assert mine["counts"].get("prompt") is None and theirs["counts"] == {"prompt": 1}


async def test_collections_save_run_and_export(client, tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(client, tenant, failing_test(sid, 3, 41))
    await digest(make_pipeline, client, tenant)
    r = await client.put(
        "/v1/collections/failures",
        json={"tags": {"event": "tool_failure"}, "description": "every failure"},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    run = (await client.get("/v1/collections/failures", headers=tenant.headers)).json()
    assert [i["tags"]["session"] for i in run["items"]] == [sid]
    for fmt, needle in (("markdown", "# failures"), ("json", '"collection"'), ("text", sid)):
        r = await client.get(
            "/v1/collections/failures/export", params={"format": fmt}, headers=tenant.headers
        )
        assert r.status_code == 200 and needle in r.text
    bad = await client.put("/v1/collections/..", json={}, headers=tenant.headers)
    assert bad.status_code in (400, 404)
    gone = await client.get("/v1/collections/nope", headers=tenant.headers)
    assert gone.status_code == 404


async def test_nothing_secret_in_jobs_or_the_feed(client, tenant, make_pipeline, db) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(
        client,
        tenant,
        ev(sid, "tool_result", tool_name="Bash", tool_input={"command": "env"}, tool_output=AWS),
    )
    await digest(make_pipeline, client, tenant)
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        for table in (
            "jobs",
            "changes",
            "notes",
            "note_versions",
            "session_inbox",
            "agent_sessions",
        ):
            dump = await s.scalar(
                text(
                    f"SELECT coalesce(string_agg(t::text, ' '), '') FROM {table} t "
                    "WHERE tenant_id = :t"
                ),
                {"t": tenant.id},
            )
            assert AWS not in (dump or ""), table


@pytest.mark.parametrize("kind", ["session_start", "stop"])
async def test_lifecycle_events_count_on_the_session(client, tenant, kind) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(client, tenant, ev(sid, kind, message="ok", source="startup"))
    r = await client.get(f"/v1/sessions/{sid}", headers=tenant.headers)
    assert r.json()["counts"] == {kind: 1}


@pytest.mark.parametrize(
    "tool_input",
    [{"command": "cat .env"}, {"file_path": "/srv/app/secrets/db.txt"},
     {"file_path": "config/my-secret-token.json"}, {"command": "less deploy/.env.production"}],
)  # fmt: skip
async def test_excluded_paths_keep_the_call_not_the_content(
    client, tenant, make_pipeline, tool_input
) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(
        client,
        tenant,
        ev(sid, "tool_result", tool_name="Bash", tool_input=tool_input, tool_output="DB=xyzzy42"),
    )
    await digest(make_pipeline, client, tenant)
    r = await client.post(
        "/v1/search",
        json={"query": "xyzzy42", "stages": "text", "tags": {"session": sid}},
        headers=tenant.headers,
    )
    assert r.json()["notes"] == []
    items = (await client.get(f"/v1/sessions/{sid}/timeline", headers=tenant.headers)).json()
    assert "not stored" in items["items"][0]["summary"]


async def test_a_quiet_session_is_checkpointed(client, tenant, make_pipeline, db) -> None:
    from datetime import UTC, datetime, timedelta

    from app.sessions import service as sessions
    from app.tenancy import scope_for_job

    sid = f"s-{uuid.uuid4().hex[:8]}"
    long_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    await send(client, tenant, ev(sid, "prompt", prompt="tidy the checkout", at=long_ago))
    await digest(make_pipeline, client, tenant)
    r = await client.get(f"/v1/sessions/{sid}/checkpoints", headers=tenant.headers)
    assert r.json()["checkpoints"] == []  # nothing said it was time yet
    async with tenancy.system_transaction(db) as s:
        quiet = await sessions.idle_sessions(s, idle_minutes=30, limit=10_000)
        mine = [(t, p, i) for t, p, i in quiet if i == sid]
        assert len(mine) == 1
        await sessions.checkpoint_idle(s, scope_for_job(mine[0][0], mine[0][1]), session_id=sid)
    await digest(make_pipeline, client, tenant)
    (cp,) = (await client.get(f"/v1/sessions/{sid}/checkpoints", headers=tenant.headers)).json()[
        "checkpoints"
    ]
    assert cp["trigger"] == "idle" and "tidy the checkout" in cp["text"]
    async with tenancy.system_transaction(db) as s:
        again = await sessions.idle_sessions(s, idle_minutes=30, limit=10_000)
    assert sid not in [i for _, _, i in again]  # checkpointed: not swept again


async def test_a_stop_checkpoints_after_enough_new_events(client, tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    steps = [
        ev(sid, "tool_result", tool_name="Bash", tool_input={"command": f"echo {i}"},
           tool_output=f"step {i}")
        for i in range(5)
    ]  # fmt: skip
    await send(client, tenant, *steps, ev(sid, "stop", message="Done with five steps."))
    await digest(make_pipeline, client, tenant)
    r = await client.get(f"/v1/sessions/{sid}/checkpoints", headers=tenant.headers)
    assert r.json()["checkpoints"] == []  # a Stop after a few events is not worth one
    many = [
        ev(sid, "tool_result", tool_name="Bash", tool_input={"command": f"echo {i}"},
           tool_output=f"step {i}")
        for i in range(5, 25)
    ]  # fmt: skip
    await send(client, tenant, *many, ev(sid, "stop", message="Decided to use Decimal for money."))
    await digest(make_pipeline, client, tenant)
    (cp,) = (await client.get(f"/v1/sessions/{sid}/checkpoints", headers=tenant.headers)).json()[
        "checkpoints"
    ]
    assert cp["trigger"] == "stop" and "use Decimal for money" in cp["text"]


async def test_a_checkpoint_on_request(client, tenant, make_pipeline) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(client, tenant, ev(sid, "prompt", prompt="port the cart to Decimal"))
    r = await client.post(
        f"/v1/sessions/{sid}/checkpoint", json={"note": "pausing here"}, headers=tenant.headers
    )
    assert r.status_code == 202, r.text
    await digest(make_pipeline, client, tenant)
    (cp,) = (await client.get(f"/v1/sessions/{sid}/checkpoints", headers=tenant.headers)).json()[
        "checkpoints"
    ]
    assert cp["trigger"] == "request"


async def test_events_sent_while_a_digest_runs_are_digested_next(
    client, tenant, make_pipeline
) -> None:
    """Intake queues no digest while one waits; a digest that took its
    batch before more arrived queues the next one itself: nothing strands."""
    from app.sessions import digest as digesting
    from app.tenancy import scope_for_job

    sid = f"s-{uuid.uuid4().hex[:8]}"
    await send(client, tenant, ev(sid, "prompt", prompt="first batch"))
    jobs = (await client.get("/v1/jobs", params={"kind": "session_digest", "status": "pending"},
                             headers=tenant.headers)).json()["jobs"]  # fmt: skip
    mine = [j for j in jobs if j["note_id"] == f"session/{sid}"]
    assert len(mine) == 1
    # A second batch while that digest waits: no second job.
    await send(client, tenant, ev(sid, "prompt", prompt="second batch"))
    jobs = (await client.get("/v1/jobs", params={"kind": "session_digest", "status": "pending"},
                             headers=tenant.headers)).json()["jobs"]  # fmt: skip
    assert len([j for j in jobs if j["note_id"] == f"session/{sid}"]) == 1
    # A digest that loaded its batch before a third one arrived.
    pipeline = make_pipeline()
    async with tenancy.tenant_id_transaction(pipeline.db, tenant.id) as s:
        project = await s.scalar(
            text("SELECT project_id FROM agent_sessions WHERE tenant_id = :t AND id = :i"),
            {"t": tenant.id, "i": sid},
        )
    scope = scope_for_job(tenant.id, project)
    async with tenancy.transaction(pipeline.db, scope) as s:
        loaded = await digesting.load(s, scope, session_id=sid, server_budget=0)
    assert loaded is not None and len(loaded.events) == 2
    await send(client, tenant, ev(sid, "prompt", prompt="third batch"))
    # The third batch saw the job waiting; a worker takes it (the one that
    # loaded the first two), so no job would ever read the third ...
    async with tenancy.transaction(pipeline.db, scope) as s:
        await s.execute(
            text("UPDATE jobs SET status = 'running' WHERE tenant_id = :t AND note_id = :n "
                 "AND kind = 'session_digest' AND status = 'pending'"),
            {"t": tenant.id, "n": f"session/{sid}"},
        )  # fmt: skip
    # ... but the digest sees the session went on, and queues the next.
    async with tenancy.transaction(pipeline.db, scope) as s:
        await digesting.apply(s, scope, loaded, None, limits=pipeline.settings.limits)
    await digest(make_pipeline, client, tenant)
    items = (await client.get(f"/v1/sessions/{sid}/timeline", params={"kind": "prompt"},
                              headers=tenant.headers)).json()["items"]  # fmt: skip
    assert [i["summary"] for i in items] == [
        "User prompt · first batch",
        "User prompt · second batch",
        "User prompt · third batch",
    ]


async def test_a_project_with_capture_off_stores_no_event(client, tenant) -> None:
    h = tenant.project("no-capture")
    r = await client.put("/v1/sessions/settings", json={"capture": False}, headers=h)
    assert r.status_code == 200 and r.json()["capture"] is False
    sid = f"s-{uuid.uuid4().hex[:8]}"
    r = await client.post("/v1/sessions/events", json={"events": [ev(sid, "prompt", prompt="hi")]},
                          headers=h)  # fmt: skip
    assert r.status_code == 202 and r.json()["accepted"] == 0 and r.json()["dropped"] == 1
    assert (await client.get(f"/v1/sessions/{sid}", headers=h)).json()["events"] == 0
    await client.put("/v1/sessions/settings", json={"capture": True}, headers=h)
    r = await client.post("/v1/sessions/events", json={"events": [ev(sid, "prompt", prompt="hi")]},
                          headers=h)  # fmt: skip
    assert r.json()["accepted"] == 1


async def test_a_tag_scoped_key_reaches_no_session(client, tenant) -> None:
    """A session belongs to a project, not to a tag: a key scoped to a tag
    gets 403 on every sessions route, and writes nothing."""
    r = await client.post(
        "/v1/subkeys",
        headers=tenant.headers,
        json={"name": "tagged", "tags": {"user": "alice"}, "expires_in_seconds": 3600,
              "scopes": ["read", "write"]},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    h = {"Authorization": f"Bearer {r.json()['key']}"}
    sid = f"s-{uuid.uuid4().hex[:8]}"
    calls = [
        ("POST", "/v1/sessions/events", {"events": [ev(sid, "prompt", prompt="hi")]}),
        ("GET", "/v1/sessions", None),
        ("GET", "/v1/sessions/resume", None),
        ("GET", "/v1/sessions/patterns", None),
        ("GET", f"/v1/sessions/{sid}", None),
        ("PUT", "/v1/sessions/settings", {"inject": False}),
        ("GET", "/v1/collections", None),
    ]
    for method, path, body in calls:
        r = await client.request(method, path, json=body, headers=h)
        assert r.status_code == 403, (path, r.text)
    assert (await client.get(f"/v1/sessions/{sid}", headers=tenant.headers)).status_code == 404


async def test_phrase_hits_are_candidates_until_a_second_session(
    client, tenant, make_pipeline
) -> None:
    """A decision, preference or to-do found by phrase alone is a candidate:
    kept with its count, in the resume block only once two sessions say it."""
    h = tenant.project("candidates")
    said = "Decided to use Decimal for every price.\nTODO: drop the float helpers"
    first, second = f"s-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"

    async def session(sid: str) -> str:
        events = [ev(sid, "prompt", cwd="/p", prompt="prices"), ev(sid, "stop", message=said),
                  ev(sid, "session_end", reason="exit")]  # fmt: skip
        r = await client.post("/v1/sessions/events", json={"events": events}, headers=h)
        assert r.status_code == 202
        await digest(make_pipeline, client, tenant)
        pipeline = make_pipeline()
        for _ in range(3):  # the project's own jobs (digest() runs the default project's)
            jobs = (await client.get("/v1/jobs", params={"status": "pending"}, headers=h)).json()
            if not jobs["jobs"]:
                break
            for job in reversed(jobs["jobs"]):
                await run_job(pipeline, tenant, job["id"])
        r = await client.get("/v1/sessions/resume", params={"cwd": "/p"}, headers=h)
        return str(r.json()["context"])

    once = await session(first)
    assert once and "Decision" not in once
    patterns = (await client.get("/v1/sessions/patterns", headers=h)).json()["patterns"]
    kinds = {p["kind"]: p for p in patterns}
    assert kinds["decision"]["sessions"] == 1 and kinds["todo"]["template"].startswith("drop the")
    twice = await session(second)
    assert "Decision x2 in 2 session(s): use Decimal for every price" in twice
