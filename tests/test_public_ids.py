"""What a tenant sees of the audit log and the change feed says nothing of
other tenants' activity.

Both tables are numbered by one sequence every tenant shares, so showing
that number let tenant B count tenant A's writes between two of its own.
Every id and cursor B sees there — audit entry ids and ``next_cursor``,
event ids on the stream (SSE ``id``, ``Last-Event-ID``, ``after``), the
export feed's ``outbox_id``, ``cursor`` and ``head_cursor``, webhook payload
event ids and a webhook's ``cursor`` — is a random id of the row; cursors are
looked up inside B's tenant and project, so paging and resuming work as
before. The test has B write, A write 0 or 50 notes, B write again, and
finds B's whole view the same either way once the random ids and times are
blanked out; every id is a random UUID, never a number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import Tenant, serving
from tests.test_events import FAST, Watcher
from tests.test_webhooks import LOCAL, Receiver, _deliver
from tests.test_webhooks import receiver as receiver  # the fixture

# gen_random_uuid(): version 4, 122 random bits
RANDOM_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
TIMES = {"at", "created_at", "request_id"}


@pytest.fixture(scope="module")
def live(settings: Settings) -> Iterator[str]:
    app = create_app(settings.model_copy(update={**FAST, **LOCAL}))
    with serving(app) as url:
        yield url


def _blank(value: Any) -> Any:
    """``value`` with every random id, time and request id blanked."""
    if isinstance(value, dict):
        return {k: "<time>" if k in TIMES else _blank(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_blank(v) for v in value]
    if isinstance(value, str):
        return RANDOM_ID.sub("<id>", value)
    return value


def _random_ids(*values: Any) -> None:
    for value in values:
        assert isinstance(value, str) and RANDOM_ID.fullmatch(value), value


async def _ok(response: Any) -> Any:
    r = await response
    assert r.status_code in (200, 201), r.text
    return r.json()


async def _view(
    base: str, a: Tenant, b: Tenant, *, a_writes: int, pipeline: Any, hooked: Receiver
) -> dict[str, Any]:
    """Everything B sees of its own two puts, A writing ``a_writes`` notes between."""
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as http,
        Watcher(base, b.headers).open() as watching,
    ):
        hook = await _ok(http.post("/v1/webhooks", json={"url": hooked.url, "kinds": ["put"]},
                                   headers=b.headers))  # fmt: skip
        await _ok(http.post("/v1/notes", json={"id": "b-1", "content": "one"}, headers=b.headers))
        for i in range(a_writes):
            await _ok(http.post("/v1/notes", json={"id": f"a-{i}", "content": "x"},
                                headers=a.headers))  # fmt: skip
        await _ok(http.post("/v1/notes", json={"id": "b-2", "content": "two"}, headers=b.headers))
        streamed = await watching.wait_for(2)
        assert [e["note_id"] for e in streamed] == ["b-1", "b-2"]
        sse_ids = [e.id for e in watching.events if e.data]
        # resuming after b-1, by header and by query: b-2 and nothing else
        for extra, params in (({"Last-Event-ID": sse_ids[0]}, {}), ({}, {"after": sse_ids[0]})):
            resumed = Watcher(base, {**b.headers, **extra}, **params)
            async with resumed.open():
                assert [e["note_id"] for e in await resumed.wait_for(1)] == ["b-2"]
        # the audit trail, a page at a time
        newest = await _ok(http.get("/v1/audit", params={"action": "api.put_note", "limit": 1},
                                    headers=b.headers))  # fmt: skip
        params = {"action": "api.put_note", "limit": 1, "cursor": newest["next_cursor"]}
        older = await _ok(http.get("/v1/audit", params=params, headers=b.headers))
        assert [newest["entries"][0]["target"], older["entries"][0]["target"]] == ["b-2", "b-1"]
        # keep's export feed: from the start, then after b-1
        feed = await _ok(http.get("/v1/export/changes", params={"cursor": "0"}, headers=b.headers))
        ours = [e for e in feed["events"] if e["entity_id"] in ("b-1", "b-2")]
        after_b1 = await _ok(http.get("/v1/export/changes", params={"cursor": ours[0]["outbox_id"]},
                                      headers=b.headers))  # fmt: skip
        assert [e["entity_id"] for e in after_b1["events"]] == ["b-2"]
        # the webhook's deliveries
        assert await _deliver(pipeline, http, b, hook) == ["done"]
        hook_now = await _ok(http.get(f"/v1/webhooks/{hook['id']}", headers=b.headers))
    delivered = [e for body in hooked.bodies() for e in body["events"]]
    _random_ids(
        *sse_ids, *(e["id"] for e in streamed),
        newest["entries"][0]["id"], newest["next_cursor"], older["entries"][0]["id"],
        *(e["outbox_id"] for e in feed["events"]), feed["cursor"], feed["head_cursor"],
        after_b1["cursor"], *(e["id"] for e in delivered), hook_now["cursor"],
    )  # fmt: skip
    assert sse_ids == [e["id"] for e in streamed] == [e["id"] for e in delivered]
    assert hook_now["cursor"] == sse_ids[-1] and feed["head_cursor"] == ours[-1]["outbox_id"]
    return {
        "sse": [(e.event, e.id, json.loads(e.data)) for e in watching.events if e.data],
        "audit": [newest, older],
        "feed": [feed, after_b1],
        "webhook": [hook_now, hooked.bodies()],
    }


async def test_another_tenants_writes_change_nothing_a_tenant_sees(
    live, make_tenant, make_pipeline, receiver
) -> None:
    views = []
    for a_writes in (0, 50):
        a, b = await make_tenant(), await make_tenant()
        receiver.got.clear()
        pipeline = make_pipeline(**LOCAL)
        views.append(await _view(live, a, b, a_writes=a_writes, pipeline=pipeline, hooked=receiver))
    quiet, busy = views
    assert _blank(quiet) == _blank(busy)
    # and the ids themselves are not the same ones (each row's own random id)
    assert quiet["feed"][0]["head_cursor"] != busy["feed"][0]["head_cursor"]


async def test_a_cursor_from_another_project_is_refused_by_the_stream(live, tenant) -> None:
    """An event id is looked up in the stream's own project: another
    project's (or, after an erasure, a gone one) is a 400 ``cursor_expired``,
    never a silent start from somewhere else."""
    async with httpx.AsyncClient(base_url=live, timeout=30) as http:
        await _ok(http.post("/v1/notes", json={"id": "elsewhere", "content": "x"},
                            headers=tenant.project("elsewhere")))  # fmt: skip
        feed = await _ok(http.get("/v1/export/changes", params={"cursor": "0"},
                                  headers=tenant.project("elsewhere")))  # fmt: skip
        foreign = feed["head_cursor"]
        for extra, params, name in (
            ({"Last-Event-ID": foreign}, {}, "Last-Event-ID"),
            ({}, {"after": foreign}, "after"),
        ):
            r = await http.get("/v1/events", headers={**tenant.headers, **extra}, params=params)
            assert r.status_code == 400, r.text
            body = r.json()
            assert body["code"] == "cursor_expired" and name in body["error"], body
            assert "reconnect without it" in body["error"]
