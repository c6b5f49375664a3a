"""Session compression with a model, against a local server speaking the
OpenAI chat-completions and Anthropic messages wire formats: what the model
is sent (never a secret), the observation it writes, the day's token
budget, garbled replies, vendor failures, and the spend in ``/v1/usage``."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app import tenancy
from app.providers import compression
from app.providers.compression import Compressor
from app.sessions.digest import BATCH
from tests.conftest import Tenant
from tests.test_pipeline import run_job
from tests.vendors import Vendor, VendorServer

AWS = "AKIA" + "QWERTYUIOPASDFGH"
REPLY = {
    "title": "Cart totals now round half-up with Decimal",
    "facts": ["src/cart.py rounds totals with Decimal.quantize", "tests/test_cart.py passes"],
    "narrative": "The agent traced the off-by-a-cent totals to float rounding and "
    "switched the cart to quantized decimals.",
    "concepts": ["rounding", "money"],
    "files": ["src/cart.py"],
}
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def ev(sid: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"platform": "claude-code", "session_id": sid, "kind": kind, **fields}


def work(sid: str, prompt: str = "Fix the rounding of the cart total") -> list[dict[str, Any]]:
    """A small batch of a session: a prompt, a command whose output holds an
    AWS key, an edit."""
    return [
        ev(sid, "prompt", cwd="/home/dev/shop", prompt=prompt),
        ev(
            sid,
            "tool_result",
            tool_name="Bash",
            tool_input={"command": "cat deploy.cfg"},
            tool_output=f"region=eu-west-1\naws_access_key_id={AWS}\n",
        ),
        ev(
            sid,
            "tool_result",
            tool_name="Edit",
            tool_input={"file_path": "src/cart.py", "old_string": "round(", "new_string": "q("},
            tool_output="ok",
        ),
    ]


def compressor(provider: str, server: VendorServer) -> Compressor:
    base = server.url + ("/v1" if provider == "openai" else "")
    made = compression.create(provider, model="m-test", base_url=base, api_key="test")
    assert made is not None
    return made


async def send(
    client: httpx.AsyncClient, headers: dict[str, str], events: list[dict[str, Any]]
) -> None:
    r = await client.post("/v1/sessions/events", json={"events": events}, headers=headers)
    assert r.status_code == 202, r.text


async def run_pending(pipeline, client, t: Tenant, headers: dict[str, str]) -> dict[str, str]:
    """One worker pass over the project's pending jobs (oldest first): kind -> outcomes."""
    r = await client.get("/v1/jobs", params={"status": "pending", "limit": 200}, headers=headers)
    assert r.status_code == 200, r.text
    outcomes: dict[str, str] = {}
    for job in reversed(r.json()["jobs"]):
        outcome = await run_job(pipeline, t, job["id"])
        outcomes[job["kind"]] = " ".join(filter(None, [outcomes.get(job["kind"]), outcome]))
    return outcomes


async def digest(pipeline, client, t: Tenant, headers: dict[str, str] | None = None) -> None:
    """Run the project's jobs until none is left (a digest may queue the next)."""
    for _ in range(5):
        outcomes = await run_pending(pipeline, client, t, headers or t.headers)
        if not outcomes:
            return
        assert set(" ".join(outcomes.values()).split()) == {"done"}, outcomes


async def observations(client, headers: dict[str, str], sid: str) -> list[dict[str, Any]]:
    r = await client.get(
        "/v1/notes",
        params={"tag": [f"session={sid}", "kind=observation"], "limit": 50},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    return sorted(r.json()["notes"], key=lambda n: n["id"])


async def spend(client, headers: dict[str, str]) -> dict[str, Any]:
    r = await client.get("/v1/sessions/spend", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def found_in_observations(client, t: Tenant, sid: str, words: str) -> bool:
    r = await client.post(
        "/v1/search",
        json={"query": words, "stages": "text", "tags": {"session": sid, "kind": "observation"}},
        headers=t.headers,
    )
    assert r.status_code == 200, r.text
    return bool(r.json()["notes"])


async def inbox_size(db, t: Tenant, sid: str) -> int:
    async with tenancy.tenant_id_transaction(db, t.id) as s:
        n = await s.scalar(
            text("SELECT count(*) FROM session_inbox WHERE session_id = :s"), {"s": sid}
        )
    return int(n or 0)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_model_writes_the_observation_and_never_sees_a_secret(
    client, tenant, make_pipeline, provider
) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    # Claude tends to fence its JSON; the reply is read all the same.
    said = json.dumps(REPLY)
    said = f"```json\n{said}\n```" if provider == "anthropic" else said
    with VendorServer(Vendor(summary=said, usage=(321, 54))) as server:
        pipeline = make_pipeline()
        pipeline.compressor = compressor(provider, server)
        try:
            await send(client, tenant.headers, work(sid))
            await digest(pipeline, client, tenant)
        finally:
            await pipeline.compressor.aclose()
        requests = list(server.vendor.requests)
    (call,) = requests
    assert call["path"] == PATHS[provider]
    if provider == "openai":
        assert call["headers"]["authorization"] == "Bearer test"
        sent = call["body"]["messages"][-1]["content"]
    else:
        assert call["headers"]["x-api-key"] == "test"
        sent = call["body"]["messages"][0]["content"]
    assert call["body"]["model"] == "m-test"
    # The events' text reaches the model, the key in the tool's output does not.
    for words in ("Fix the rounding of the cart total", "src/cart.py", "region=eu-west-1"):
        assert words in sent
    assert "[REDACTED:" in sent
    assert AWS not in json.dumps([r["body"] for r in requests])
    (obs,) = await observations(client, tenant.headers, sid)
    assert obs["summary"] == REPLY["title"]
    assert obs["tags"]["kind"] == "observation" and obs["tags"]["source"] == "llm"
    assert set(obs["tags"]["concept"]) == {"rounding", "money"}
    assert "src/cart.py" in obs["tags"]["file"]
    assert await found_in_observations(client, tenant, sid, "quantized decimals")
    today = await spend(client, tenant.headers)
    assert (today["calls"], today["tokens_in"], today["tokens_out"]) == (1, 321, 54)
    assert today["refused"] == 0


async def test_a_call_over_the_days_budget_is_not_made(client, tenant, make_pipeline) -> None:
    # Each call reports 900 tokens; the project allows 1500 a day: the first
    # call fits (its estimate is under 1500), the second cannot (600 left,
    # and a call may take 600 tokens of output alone).
    r = await client.put(
        "/v1/sessions/settings", json={"llm_tokens_per_day": 1500}, headers=tenant.headers
    )
    assert r.status_code == 200 and r.json()["llm_tokens_per_day"] == 1500
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with VendorServer(Vendor(summary=json.dumps(REPLY), usage=(600, 300))) as server:
        pipeline = make_pipeline()
        pipeline.compressor = compressor("openai", server)
        try:
            await send(client, tenant.headers, work(sid))
            await digest(pipeline, client, tenant)
            await send(client, tenant.headers, work(sid, prompt="Now add a discount code field"))
            await digest(pipeline, client, tenant)
        finally:
            await pipeline.compressor.aclose()
        calls = len(server.vendor.requests)
    assert calls == 1
    today = await spend(client, tenant.headers)
    assert today["budget"] == 1500
    assert (today["calls"], today["tokens_in"], today["tokens_out"]) == (1, 600, 300)
    assert today["refused"] >= 1
    first, second = await observations(client, tenant.headers, sid)
    assert first["tags"]["source"] == "llm"
    # The refused batch still has its observation, by the rules.
    assert second["tags"]["source"] == "rules" and "concept" not in second["tags"]
    assert second["summary"] != REPLY["title"]
    digests = (
        await client.get("/v1/jobs", params={"kind": "session_digest"}, headers=tenant.headers)
    ).json()["jobs"]
    assert sorted(j["result"]["model"] for j in digests) == ["refused", "used"]


@pytest.mark.parametrize(
    "said",
    [
        "I'm sorry, I can't summarise this session.",
        '{"title": "  ", "facts": ["", "   "], "narrative": null}',
    ],
)
async def test_a_garbled_reply_leaves_the_rules_observation(
    client, tenant, make_pipeline, said
) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with VendorServer(Vendor(summary=said, usage=(200, 12))) as server:
        pipeline = make_pipeline()
        pipeline.compressor = compressor("openai", server)
        try:
            await send(client, tenant.headers, work(sid))
            await digest(pipeline, client, tenant)
        finally:
            await pipeline.compressor.aclose()
        assert len(server.vendor.requests) == 1
    (obs,) = await observations(client, tenant.headers, sid)
    assert obs["tags"]["source"] == "rules"
    assert obs["summary"].startswith("Session work: changed 1 file(s)")
    # The rules' facts are the observation's: what was asked, what changed.
    assert await found_in_observations(client, tenant, sid, "rounding cart total")
    today = await spend(client, tenant.headers)
    assert (today["calls"], today["tokens_in"], today["tokens_out"]) == (1, 200, 12)


async def test_a_vendor_500_retries_the_digest_and_loses_nothing(
    client, tenant, make_pipeline, db
) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    vendor = Vendor(summary=json.dumps(REPLY), usage=(100, 20), fail_status=500, fail_times=1)
    with VendorServer(vendor) as server:
        pipeline = make_pipeline(job_backoff_base_seconds=0)
        pipeline.compressor = compressor("openai", server)
        try:
            await send(client, tenant.headers, work(sid))
            first = await run_pending(pipeline, client, tenant, tenant.headers)
            assert first["session_digest"] == "retry"
            assert await inbox_size(db, tenant, sid) == 3
            assert await observations(client, tenant.headers, sid) == []
            assert (await spend(client, tenant.headers))["calls"] == 0
            later = await run_pending(pipeline, client, tenant, tenant.headers)
            assert later == {"session_digest": "done"}
        finally:
            await pipeline.compressor.aclose()
        assert len(server.vendor.requests) == 2
    assert await inbox_size(db, tenant, sid) == 0
    (obs,) = await observations(client, tenant.headers, sid)
    assert obs["tags"]["source"] == "llm" and obs["summary"] == REPLY["title"]
    today = await spend(client, tenant.headers)
    assert (today["calls"], today["tokens_in"], today["tokens_out"]) == (1, 100, 20)


async def test_a_permanent_vendor_failure_leaves_the_rules_digest(
    client, tenant, make_pipeline, db
) -> None:
    # A bad key fails every call alike: the digest goes on without the model.
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with VendorServer(Vendor(fail_status=401, fail_times=-1)) as server:
        pipeline = make_pipeline()
        pipeline.compressor = compressor("openai", server)
        try:
            await send(client, tenant.headers, work(sid))
            await digest(pipeline, client, tenant)
        finally:
            await pipeline.compressor.aclose()
        assert len(server.vendor.requests) == 1
    assert await inbox_size(db, tenant, sid) == 0
    (obs,) = await observations(client, tenant.headers, sid)
    assert obs["tags"]["source"] == "rules"
    (job,) = (
        await client.get("/v1/jobs", params={"kind": "session_digest"}, headers=tenant.headers)
    ).json()["jobs"]
    assert job["status"] == "done" and job["result"]["model"] == "failed"
    today = await spend(client, tenant.headers)
    assert (today["calls"], today["tokens_in"], today["refused"]) == (0, 0, 0)


async def test_an_inbox_over_one_batch_is_digested_to_the_end(
    client, tenant, make_pipeline, db
) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    total = BATCH + 100
    for start in range(0, total, 100):
        events = [ev(sid, "session_start", source=f"resume-{i}") for i in range(start, start + 100)]
        await send(client, tenant.headers, events)
    await digest(make_pipeline(), client, tenant)
    assert await inbox_size(db, tenant, sid) == 0
    done = (
        await client.get("/v1/jobs", params={"kind": "session_digest"}, headers=tenant.headers)
    ).json()["jobs"]
    ran = sorted((j["result"]["events"], j["result"]["more"]) for j in done if j["result"])
    assert ran == [(100, False), (BATCH, True)]


async def test_usage_shows_the_days_model_tokens_of_every_project(
    client, tenant, other_tenant, make_pipeline
) -> None:
    beta = tenant.project("beta")
    with VendorServer(Vendor(summary=json.dumps(REPLY), usage=(150, 30))) as server:
        pipeline = make_pipeline()
        pipeline.compressor = compressor("openai", server)
        try:
            for headers in (tenant.headers, beta):
                await send(client, headers, work(f"s-{uuid.uuid4().hex[:8]}"))
                await digest(pipeline, client, tenant, headers)
        finally:
            await pipeline.compressor.aclose()
        assert len(server.vendor.requests) == 2
    assert (await spend(client, beta))["tokens_in"] == 150
    usage = (await client.get("/v1/usage", headers=tenant.headers)).json()
    assert usage["model_tokens_today"] == {"calls": 2, "tokens_in": 300, "tokens_out": 60}
    theirs = (await client.get("/v1/usage", headers=other_tenant.headers)).json()
    assert theirs["model_tokens_today"] == {"calls": 0, "tokens_in": 0, "tokens_out": 0}
    spec = (await client.get("/openapi.json")).json()
    field = spec["components"]["schemas"]["Usage"]["properties"]["model_tokens_today"]
    assert "session" in field["description"]


def test_a_reply_is_read_from_prose_and_blanks_are_dropped() -> None:
    said = (
        "Here you go {as asked}:\n```json\n"
        '{"title": " Fixed\\n the cart ", "facts": ["", "one", "one", 3, "two"], '
        '"narrative": "N.", "concepts": [" ", "db", true], "files": ["a.py", null]}'
        "\n```\nAnything else {x}?"
    )
    got = compression.parse_reply(said, 10, 5)
    assert got.title == "Fixed the cart"
    assert got.facts == ["one", "two"]
    assert got.concepts == ["db"] and got.files == ["a.py"]
    assert got.narrative == "N." and (got.tokens_in, got.tokens_out) == (10, 5)
    assert compression.parse_reply("no JSON here", 1, 1).has_content is False
