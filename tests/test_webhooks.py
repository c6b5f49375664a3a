"""Webhooks against a local receiver: signed deliveries of a project's
events, handed off once through the job outbox, retried with backoff,
dead-lettered visibly and retried by hand, filtered, paused without losing
anything, kept to the addresses the fetch rules allow, and per tenant."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from app.db import Database
from app.events.webhooks import SIGNATURE_HEADER, verify
from app.main import create_app
from app.pipeline import dispatcher
from app.settings import Settings
from tests.conftest import Tenant
from tests.test_pipeline import jobs_of, run_all, run_job

LOCAL = {"fetch_allow_networks": ["127.0.0.1/32"]}


class Receiver:
    """A webhook receiver on 127.0.0.1 answering ``status`` and keeping
    every request it got."""

    def __init__(self) -> None:
        self.status = 200
        self.got: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.got]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture(scope="module")
async def local(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """The API with loopback allowed as a webhook address (as an operator
    may allow an internal network)."""
    app = create_app(settings.model_copy(update=LOCAL), db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://keepmem.test") as c:
            yield c


async def _hook(http: httpx.AsyncClient, t: Tenant, url: str, **body: Any) -> dict[str, Any]:
    r = await http.post("/v1/webhooks", json={"url": url, **body}, headers=t.headers)
    assert r.status_code == 201, r.text
    return r.json()


async def _put(http: httpx.AsyncClient, t: Tenant, note_id: str, **tags: str) -> None:
    r = await http.post("/v1/notes", json={"id": note_id, "content": f"note {note_id}",
                                            "tags": tags}, headers=t.headers)  # fmt: skip
    assert r.status_code == 200, r.text


async def _deliveries(http: httpx.AsyncClient, t: Tenant, hook: dict, **params: Any) -> list:
    r = await http.get(f"/v1/webhooks/{hook['id']}/deliveries", params=params, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()["deliveries"]


async def _deliver(pipeline: Any, http: httpx.AsyncClient, t: Tenant, hook: dict) -> list[str]:
    """One fan-out round, then run the webhook's pending deliveries."""
    await dispatcher.hand_off_webhooks(pipeline)
    return [
        await run_job(pipeline, t, job["id"])
        for job in reversed(await _deliveries(http, t, hook, status="pending"))
    ]


async def test_deliveries_are_signed_once_per_change(
    local, tenant, receiver, make_pipeline
) -> None:
    pipeline = make_pipeline(**LOCAL)
    hook = await _hook(local, tenant, receiver.url, kinds=["put", "tag"])
    assert hook["secret"].startswith("whsec_") and hook["active"] is True
    await _put(local, tenant, "w-1", topic="x")
    await _put(local, tenant, "w-2")
    r = await local.patch("/v1/notes/w-1/tags", json={"set": {"seen": "1"}}, headers=tenant.headers)
    assert r.status_code == 200

    assert await _deliver(pipeline, local, tenant, hook) == ["done"]
    assert len(receiver.got) == 1
    headers, raw = receiver.got[0]
    assert verify(hook["secret"], raw, headers[SIGNATURE_HEADER.lower()])
    assert not verify("whsec_not-the-secret", raw, headers[SIGNATURE_HEADER.lower()])
    assert not verify(hook["secret"], raw + b" ", headers[SIGNATURE_HEADER.lower()])
    body = json.loads(raw)
    assert body["webhook_id"] == hook["id"]
    assert body["delivery_id"] == headers["keepmem-delivery"]
    assert [(e["kind"], e["note_id"]) for e in body["events"]] == [
        ("put", "w-1"),
        ("put", "w-2"),
        ("tag", "w-1"),
    ]
    assert body["events"][2]["tags"] == {"topic": "x", "seen": "1"}
    done = await _deliveries(local, tenant, hook)
    assert [(d["status"], d["result"]) for d in done] == [("done", {"status": 200})]

    # The worker's own events (summaries, embeddings) are not wanted; nothing
    # is offered twice.
    await run_all(pipeline, local, tenant)
    assert await _deliver(pipeline, local, tenant, hook) == []
    assert len(receiver.got) == 1


async def test_failures_retry_then_dead_letter_then_retry_by_hand(
    local, tenant, receiver, make_pipeline
) -> None:
    pipeline = make_pipeline(**LOCAL, webhook_max_attempts=2, job_backoff_base_seconds=0)
    receiver.status = 500
    hook = await _hook(local, tenant, receiver.url)
    await _put(local, tenant, "d-1")
    assert await _deliver(pipeline, local, tenant, hook) == ["retry"]
    [pending] = await _deliveries(local, tenant, hook)
    assert pending["status"] == "pending" and pending["attempts"] == 1
    assert "HTTP 500" in pending["last_error"]
    assert await _deliver(pipeline, local, tenant, hook) == ["dead"]
    [dead] = await _deliveries(local, tenant, hook, status="dead")
    assert dead["id"] == pending["id"] and dead["dead_lettered_at"] is not None
    # Dead letters show in the jobs API too, and are retried from there.
    dead_jobs = await jobs_of(local, tenant, status="dead", kind="webhook")
    assert [j["id"] for j in dead_jobs] == [dead["id"]]
    receiver.status = 204
    r = await local.post(f"/v1/jobs/{dead['id']}/retry", headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert await _deliver(pipeline, local, tenant, hook) == ["done"]
    bodies = receiver.bodies()
    assert len(bodies) == 3
    assert all(b == bodies[0] for b in bodies)  # the same delivery each time
    assert [e["note_id"] for e in bodies[0]["events"]] == ["d-1"]


async def test_filters_and_a_pause_that_loses_nothing(
    local, tenant, receiver, make_pipeline
) -> None:
    pipeline = make_pipeline(**LOCAL)
    hook = await _hook(local, tenant, receiver.url, kinds=["delete"], tags={"topic": "x"})
    for note, tags in (("p-1", {"topic": "x"}), ("p-2", {})):
        await _put(local, tenant, note, **tags)
        assert (await local.delete(f"/v1/notes/{note}", headers=tenant.headers)).status_code == 200
    assert await _deliver(pipeline, local, tenant, hook) == ["done"]
    assert [(e["kind"], e["note_id"]) for e in receiver.bodies()[0]["events"]] == [
        ("delete", "p-1")
    ]

    r = await local.patch(f"/v1/webhooks/{hook['id']}", json={"active": False},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code == 200 and r.json()["active"] is False
    await _put(local, tenant, "p-3", topic="x")
    assert (await local.delete("/v1/notes/p-3", headers=tenant.headers)).status_code == 200
    assert await _deliver(pipeline, local, tenant, hook) == []
    r = await local.patch(f"/v1/webhooks/{hook['id']}", json={"active": True},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code == 200
    assert await _deliver(pipeline, local, tenant, hook) == ["done"]
    assert [e["note_id"] for e in receiver.bodies()[1]["events"]] == ["p-3"]


async def test_addresses_follow_the_fetch_rules(client, local, tenant, make_pipeline) -> None:
    # Without the operator's allowance: loopback, private and metadata
    # addresses are refused when the webhook is made ...
    for url in ("http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://169.254.169.254/latest"):
        r = await client.post("/v1/webhooks", json={"url": url}, headers=tenant.headers)
        assert r.status_code == 400, r.text
        assert "refused" in r.json()["error"]
    r = await client.post("/v1/webhooks", json={"url": "ftp://example.com/x"},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code == 422
    # ... and when it is delivered (the allowance was withdrawn since).
    hook = await _hook(local, tenant, "http://127.0.0.1:9/gone")
    await _put(local, tenant, "a-1")
    assert await _deliver(make_pipeline(), local, tenant, hook) == ["dead"]
    [dead] = await _deliveries(local, tenant, hook)
    assert "refusing" in dead["last_error"] and dead["attempts"] == 1


async def test_webhooks_are_the_tenants_own_and_need_admin(
    local, tenant, other_tenant, receiver, make_pipeline
) -> None:
    hook = await _hook(local, tenant, receiver.url)
    assert (
        "secret"
        not in (await local.get("/v1/webhooks", headers=tenant.headers)).json()["webhooks"][0]
    )
    for method, path in (
        ("GET", f"/v1/webhooks/{hook['id']}"),
        ("PATCH", f"/v1/webhooks/{hook['id']}"),
        ("DELETE", f"/v1/webhooks/{hook['id']}"),
        ("GET", f"/v1/webhooks/{hook['id']}/deliveries"),
        ("POST", f"/v1/webhooks/{hook['id']}/ping"),
    ):
        r = await local.request(method, path, headers=other_tenant.headers, json={})
        assert r.status_code == 404, (method, path, r.text)
    r = await local.get("/v1/webhooks", headers=other_tenant.headers)
    assert r.json()["webhooks"] == []
    # Another tenant's writes never reach this webhook.
    await _put(local, other_tenant, "theirs")
    await _put(local, tenant, "mine")
    assert await _deliver(make_pipeline(**LOCAL), local, tenant, hook) == ["done"]
    assert [e["note_id"] for e in receiver.bodies()[0]["events"]] == ["mine"]
    # A read-only key cannot manage webhooks.
    ro_key = {"name": "ro", "scopes": ["read"], "expires_in_seconds": 60}
    r = await local.post("/v1/subkeys", headers=tenant.headers, json=ro_key)
    assert r.status_code == 201, r.text
    ro = {"Authorization": f"Bearer {r.json()['key']}"}
    r = await local.post("/v1/webhooks", json={"url": receiver.url}, headers=ro)
    assert r.status_code == 403


async def test_ping_delete_and_limits(local, tenant, receiver, make_pipeline) -> None:
    pipeline = make_pipeline(**LOCAL)
    hook = await _hook(local, tenant, receiver.url, secret="a-secret-of-my-own-choosing")
    assert hook["secret"] == "a-secret-of-my-own-choosing"
    r = await local.post(f"/v1/webhooks/{hook['id']}/ping", headers=tenant.headers)
    assert r.status_code == 202, r.text
    assert await _deliver(pipeline, local, tenant, hook) == ["done"]
    headers, raw = receiver.got[0]
    assert verify("a-secret-of-my-own-choosing", raw, headers["keepmem-signature"])
    assert json.loads(raw)["events"][0]["kind"] == "ping"
    # Deleted: queued deliveries send nothing.
    await _put(local, tenant, "late")
    await dispatcher.hand_off_webhooks(pipeline)
    [queued] = await _deliveries(local, tenant, hook, status="pending")
    assert (
        await local.delete(f"/v1/webhooks/{hook['id']}", headers=tenant.headers)
    ).status_code == 204
    assert await run_job(pipeline, tenant, queued["id"]) == "done"
    assert len(receiver.got) == 1
    r = await local.get(f"/v1/webhooks/{hook['id']}", headers=tenant.headers)
    assert r.status_code == 404
    # Bad input: unknown kinds, a short secret, too many webhooks.
    r = await local.post("/v1/webhooks", json={"url": receiver.url, "kinds": ["nope"]},
                         headers=tenant.headers)  # fmt: skip
    assert r.status_code == 400 and "unknown event kind" in r.json()["error"]
    r = await local.post("/v1/webhooks", json={"url": receiver.url, "secret": "short"},
                         headers=tenant.headers)  # fmt: skip
    assert r.status_code == 422
    project = tenant.project("hooks")
    for _ in range(10):
        r = await local.post("/v1/webhooks", json={"url": receiver.url}, headers=project)
        assert r.status_code == 201
    r = await local.post("/v1/webhooks", json={"url": receiver.url}, headers=project)
    assert r.status_code == 409 and "at most 10" in r.json()["error"]


async def test_a_busy_project_is_handed_off_in_full_batches(
    local, tenant, receiver, make_pipeline
) -> None:
    pipeline = make_pipeline(**LOCAL)
    hook = await _hook(local, tenant, receiver.url, kinds=["put"])
    for start in (0, 100):
        notes = [{"id": f"busy-{start + i}", "content": f"busy {start + i}"} for i in range(100)]
        r = await local.post("/v1/notes/batch", json={"notes": notes}, headers=tenant.headers)
        assert r.status_code == 200 and r.json()["stored"] == 100, r.text
    # One round hands off everything waiting, 100 events a delivery.
    assert await _deliver(pipeline, local, tenant, hook) == ["done", "done"]
    events = [e for body in receiver.bodies() for e in body["events"]]
    assert [len(body["events"]) for body in receiver.bodies()] == [100, 100]
    assert [e["note_id"] for e in events] == [f"busy-{i}" for i in range(200)]
    # ordered by the feed (above); the ids are random, so they say nothing of order
    assert len({e["id"] for e in events}) == 200


async def test_an_empty_patch_changes_nothing_and_nulls_are_refused(
    local, tenant, receiver
) -> None:
    """PATCH names the fields to change: none is a no-op answered with the
    webhook (before: an UPDATE with no columns, a 500); a null for a field
    that always has a value is a 400 naming it, and changes nothing."""
    hook = await _hook(local, tenant, receiver.url, kinds=["put"], description="mine")
    path = f"/v1/webhooks/{hook['id']}"
    r = await local.patch(path, json={}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    unchanged = {k: v for k, v in hook.items() if k != "secret"}
    assert r.json() == unchanged
    for nulls in ({"url": None, "active": None}, {"kinds": None}, {"description": None},
                  {"tags": None, "active": False}):  # fmt: skip
        r = await local.patch(path, json=nulls, headers=tenant.headers)
        assert r.status_code == 400, (nulls, r.text)
        body = r.json()
        assert body["code"] == "bad_request" and body["request_id"]
        assert all(f"{name}" in body["error"] for name in nulls if nulls[name] is None)
        assert "cannot be null" in body["error"]
    got = await local.get(path, headers=tenant.headers)
    assert got.json() == unchanged  # the refused patches changed nothing, active included
    r = await local.patch(path, json={"description": "renamed"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["description"] == "renamed"
    assert r.json()["kinds"] == ["put"] and r.json()["url"] == receiver.url


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com:99999/",
        "http://[::1/",
        "http://.../",
        "http://exa\x85mple.com/",
        "http://exa\nmple.com/",
        "http://[::1]junk/",
    ],
)
async def test_malformed_urls_are_a_clean_400_at_registration_and_patch(
    local, tenant, receiver, url: str
) -> None:
    r = await local.post("/v1/webhooks", json={"url": url}, headers=tenant.headers)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "bad_request" and "malformed URL" in r.json()["error"]
    assert (await local.get("/v1/webhooks", headers=tenant.headers)).json()["webhooks"] == []
    hook = await _hook(local, tenant, receiver.url)
    r = await local.patch(f"/v1/webhooks/{hook['id']}", json={"url": url}, headers=tenant.headers)
    assert r.status_code == 400 and "malformed URL" in r.json()["error"], r.text
    got = await local.get(f"/v1/webhooks/{hook['id']}", headers=tenant.headers)
    assert got.json()["url"] == receiver.url
