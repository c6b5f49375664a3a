"""keep's POST /v1/flow: every flow request keep-skill 0.163.4 was seen to
send (shared/keep-capture), replayed in order, and the responses keep's own
implementation gives (realflow-flows.json) matched key for key where keep's
clients read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CAPTURE = Path(__file__).resolve().parents[2] / "shared" / "keep-capture"
pytestmark = pytest.mark.skipif(not CAPTURE.exists(), reason="shared/keep-capture not present")


def _captured(name: str) -> list[tuple[str, dict[str, Any]]]:
    out, label = [], ""
    for line in (CAPTURE / name).read_text().splitlines():
        record = json.loads(line)
        if "label" in record:
            label = record["label"]
            continue
        body = record.get("body")
        if isinstance(body, str):
            body = json.loads(body)
        if record["path"] == "/v1/flow" and isinstance(body, dict):
            out.append((label, body))
    return out


async def _flow(client, tenant, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.post("/v1/flow", json=body, headers=tenant.project("demo-proj"))
    assert r.status_code == 200, (body, r.text)
    return r.json()


def _reads(state: str, out: dict[str, Any]) -> None:
    """What keep's clients read from each state's answer (KEEP_PROTOCOL §4-5)."""
    b, data = out["bindings"], out["data"]
    if state in ("put", "stub"):
        assert b["stored"]["id"] and "summary" in b["stored"] and "tags" in b["stored"]
    elif state == "compat-get-item":
        assert isinstance(data["item"], dict)
    elif state == "get":
        assert "item" in b
        if b["item"]:
            for key in ("similar", "parts", "meta", "edges"):
                assert key in b, key
    elif state == "list":
        assert isinstance(b["results"]["results"], list)
        assert data["results"]["results"] == b["results"]["results"]
    elif state == "list_versions":
        assert isinstance(data["versions"]["versions"], list) and "count" in data["versions"]
    elif state == "tag":
        tagged = b["tagged"]
        assert tagged.get("id") or tagged.get("skipped")
    elif state == "delete":
        assert b["result"]["deleted"]
    elif state == "move":
        assert b["moved"]["id"]
    elif state == "compat-find":
        assert isinstance(data["items"], list) and isinstance(data["deep_groups"], dict)
    elif state == "query-resolve":
        assert isinstance(data["results"], list) and "margin" in data and "entropy" in data
    elif state == "prompt":
        assert "prompts" in data or "text" in data or "error" in data


@pytest.mark.parametrize("capture", ["verify.jsonl", "requests.jsonl", "requests_cli.jsonl"])
async def test_every_captured_flow_request_is_answered(client, make_tenant, capture) -> None:
    tenant = await make_tenant()
    for label, body in _captured(capture):
        out = await _flow(client, tenant, body)
        state = body["state"]
        if state == "compat-analyze":
            # a short note cannot be split; keep's CLI shows the reason
            assert out["status"] in ("async", "error"), out
            continue
        if state == "move" and "error" in out["bindings"].get("moved", {}):
            # the capture moves from `now` before anything made it: keep says
            # so too, as the action's error (the flow itself is done)
            assert out["bindings"]["moved"]["code"] == "note_not_found", out
            assert out["status"] == "done", out
            continue
        if state == "prompt" and body["params"].get("name") and out["status"] == "error":
            assert out["data"]["error"].startswith("prompt not found"), out
            continue
        if state.startswith("query-") and out["status"] == "stopped":
            # nothing stands out in a near-empty store: keep's query flows
            # widen until the budget runs out (the runtime hands back a
            # cursor, or query-explore's own last rule stops first)
            assert out["data"]["reason"] == "budget", out
            continue
        assert out["status"] == "done", (label, body, out)
        _reads(state, out)
        assert out["history"] == [state] and out["ticks"] >= 1


REALFLOW = json.loads((CAPTURE / "realflow-flows.json").read_text()) if CAPTURE.exists() else {}


async def test_responses_have_keeps_shape(client, tenant) -> None:
    """Run keep's recorded session (put, get, list, tag, versions, context,
    prompts, move, delete, find) and compare each answer's keys with keep's."""
    order = ["put", "put_again_new_content", "put_inline_noid", "compat_get_item",
             "compat_get_item_missing", "list", "tag", "list_versions", "get_context_flow",
             "prompt_list", "compat_find", "move", "delete", "nonexistent_state"]  # fmt: skip
    for name in order:
        case = REALFLOW[name]
        ours = await _flow(client, tenant, case["request"])
        theirs = case["response"]
        assert ours["status"] == theirs["status"], (name, ours)
        assert set(ours["bindings"]) >= set(theirs["bindings"]) - {"assessed", "session"}, name
        for key, value in theirs["bindings"].items():
            if isinstance(value, dict) and key in ours["bindings"] and value:
                missing = set(value) - set(ours["bindings"][key])
                assert not missing, (name, key, missing)
        if isinstance(theirs.get("data"), dict):
            assert set(ours["data"] or {}) >= set(theirs["data"]) - {"assessed", "session"}, name


async def test_flow_level_failures_are_answers(client, tenant) -> None:
    """keep's split: a flow that cannot run is ``status: error`` with a
    reason; an action that refuses its input binds ``{"error": ...}`` and
    the flow goes on (keep's CLI reads ``bindings.<rule>.error``)."""
    out = await _flow(client, tenant, {"state": "no-such-state", "params": {}})
    assert out["status"] == "error" and "state doc not found" in out["data"]["reason"]
    out = await _flow(
        client, tenant, {"state": "put", "params": {"content": "x"}, "writable": False}
    )
    assert out["status"] == "done" and "read-only" in out["bindings"]["stored"]["error"]
    out = await _flow(
        client, tenant, {"state": "tag", "params": {"id": "ghost", "tags": {"a": "b"}}}
    )
    assert out["status"] == "done" and "not found" in out["bindings"]["tagged"]["error"]
    out = await _flow(
        client, tenant, {"state": "put", "params": {"content": "x"}, "state_doc_yaml": "rules: []"}
    )
    assert out["status"] == "error" and "inline state doc" in out["data"]["reason"]
    assert "match" in out["data"]["reason"]
    out = await _flow(client, tenant, {"state": "prompt", "params": {"name": "nope"}})
    assert out["status"] == "error" and out["data"]["error"] == "prompt not found: nope"


async def test_a_failed_state_leaves_nothing_behind(client, tenant) -> None:
    out = await _flow(
        client,
        tenant,
        {"state": "put", "params": {"content": "x", "id": "bad;id", "tags": {"k": "v"}}},
    )
    assert "error" in out["bindings"]["stored"]
    # a flow that fails after a write (a sub-flow fails) is rolled back whole
    doc = (
        "match: sequence\nrules:\n  - id: stored\n    do: put\n    with: {content: kept, id: w1}\n"
        "  - do: .state/no-such-flow\n"
    )
    out = await _flow(client, tenant, {"state": "two-step", "params": {}, "state_doc_yaml": doc})
    assert out["status"] == "error" and "no-such-flow" in out["data"]["reason"]
    listed = await _flow(client, tenant, {"state": "list", "params": {"limit": 50}})
    assert listed["bindings"]["results"]["results"] == []


async def test_read_only_key_cannot_run_write_states(client, tenant) -> None:
    r = await client.post(
        "/v1/keys", json={"name": "ro", "scopes": ["read"]}, headers=tenant.headers
    )
    ro = {"Authorization": f"Bearer {r.json()['key']}"}
    r = await client.post("/v1/flow", json={"state": "put", "params": {"content": "x"}}, headers=ro)
    assert r.status_code == 403 and r.json()["code"] == "missing_scope"
    r = await client.post("/v1/flow", json={"state": "list", "params": {}}, headers=ro)
    assert r.status_code == 200 and r.json()["status"] == "done"


async def test_budget_stop_and_resume(client, tenant) -> None:
    await _flow(client, tenant, {"state": "put", "params": {"content": "the harbour", "id": "h"}})
    stopped = await _flow(
        client, tenant, {"state": "compat-get-item", "params": {"id": "h"}, "budget": 0}
    )
    assert stopped["status"] == "stopped" and stopped["cursor"]
    resumed = await _flow(
        client,
        tenant,
        {"state": "__cursor__", "params": {"id": "h"}, "cursor_token": stopped["cursor"]},
    )
    assert resumed["status"] == "done" and resumed["data"]["item"]["id"] == "h"
    bad = await _flow(client, tenant, {"state": "__cursor__", "params": {}, "cursor": "%%%"})
    assert bad["status"] == "error" and bad["data"]["reason"] == "invalid cursor"


async def test_token_budget_renders_text_within_it(client, tenant) -> None:
    for i in range(20):
        await _flow(
            client, tenant, {"state": "put", "params": {"content": f"note {i} about boats" * 5}}
        )
    out = await _flow(
        client, tenant, {"state": "list", "params": {"limit": 20}, "token_budget": 30}
    )
    assert out["rendered"] and len(out["rendered"]) <= 30 * 4


def _all_captured() -> list[tuple[str, dict[str, Any]]]:
    out, label = [], ""
    for name in ("requests.jsonl", "requests_cli.jsonl", "err.jsonl", "verify.jsonl"):
        for line in (CAPTURE / name).read_text().splitlines():
            record = json.loads(line)
            if "label" in record:
                label = record["label"]
            else:
                out.append((f"{name}:{label}", record))
    return out


async def test_every_captured_request_gets_what_the_client_reads(client, make_tenant) -> None:
    """Each request keep-skill sends (every endpoint, as captured: method, raw
    path, query, body, X-Project), replayed; the answer has what keep reads."""
    tenant = await make_tenant()
    # what the captured reads refer to
    for note_id, versions in (
        ("file:///a b/c.md", 3),
        ("note-1", 1),
        ("file:///home/user/note.md", 1),
    ):
        for i in range(versions):  # the context capture views version 2 of c.md
            await client.post(
                "/v1/notes",
                json={"id": note_id, "content": f"draft {i}"},
                headers=tenant.project("demo-proj"),
            )
    task_id = None
    for label, record in _all_captured():
        path = record["raw_path"]
        if task_id and "/v1/tasks/task-1" in path:
            path = path.replace("task-1", task_id)  # ids are ours to make
        headers = {**tenant.headers, "content-type": "application/json"}
        if "x-project" in record["headers"]:
            headers["X-Project"] = record["headers"]["x-project"]
        body = record.get("body")
        content = json.dumps(body).encode() if body is not None else None
        r = await client.request(record["method"], path, content=content, headers=headers)
        assert r.status_code in (200, 201, 204), (label, path, r.status_code, r.text[:300])
        if r.status_code == 204:
            continue
        if path.startswith("/v1/export?") and "stream=ndjson" in path:
            head = json.loads(r.text.splitlines()[0])
            assert {"document_count", "version_count", "part_count"} <= set(head["store_info"])
            continue
        got = r.json()
        if path.startswith("/v1/flow"):
            assert got["status"] in ("done", "error", "async", "stopped"), (label, got)
            assert {"status", "bindings", "data", "ticks", "history", "cursor"} <= set(got)
        elif "/context" in path:
            assert set(got) == {"item", "viewing_offset", "similar", "meta", "edges", "parts",
                                "focus_part", "expand_parts", "prev", "next"}  # fmt: skip
        elif path == "/v1/health":
            assert isinstance(got["item_count"], int)
        elif path == "/v1/ready":
            assert got["capabilities"]["export_bundle"] and got["capabilities"]["export_changes"]
        elif path.startswith("/v1/export/bundles/"):
            assert {"document", "current_inverse", "version_inverse", "edge_tag_keys"} <= set(got)
        elif path.startswith("/v1/export/changes"):
            assert {"cursor", "head_cursor", "compacted", "truncated", "events"} <= set(got)
        elif path == "/v1/processors":
            assert got["processors"]
        elif path == "/v1/tasks":
            task_id = got["task_id"]
        elif path.startswith("/v1/tasks/"):
            assert got["status"] in ("queued", "processing", "completed", "failed")
        elif path == "/v1/import":
            assert {"imported", "versions", "parts", "skipped", "queued"} <= set(got)
        elif path.startswith("/v1/notes/"):
            assert {"id", "summary", "tags"} <= set(got)
