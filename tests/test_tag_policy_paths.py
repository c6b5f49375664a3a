"""The keep backend and the property test of the tag rules
(app/notes/tag_policy.py; the rules and the REST paths are in
tests/test_tag_policy.py): keep's own Keeper on keepmem's storage backend,
the backend's record writes, and random writes through put, tag, batch,
import, flows and the keep backend, the rules checked after each one."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.keepstore.connection import Connection, Params
from app.kit import tags as tagrules
from app.notes import records, tag_policy
from tests.conftest import SECRET, Tenant
from tests.test_keep_backend import environment
from tests.test_tag_policy import ALLOWED_LEVELS, CODE, declare, flow_refused, path, tags_of
from tests.vendors import Vendor, VendorServer

# -- keep's storage backend --------------------------------------------------------------------


def _keep_upsert(conn: Connection, note_id: str, tags: dict[str, Any], summary: str = "s") -> Any:
    """What keep's ``DocumentStore.upsert`` runs on keepmem (app/keepstore/documents.py)."""
    return conn.run(
        "default",
        lambda s, sc: records.upsert(
            s, sc, note_id=note_id, summary=summary, tags=tags, content_hash=summary,
            created_at=None, graph_extraction=False,
        ),
        write=True,
    )  # fmt: skip


def _keep_set_tags(conn: Connection, note_id: str, tags: dict[str, Any]) -> bool:
    """What keep's ``DocumentStore.update_tags`` runs on keepmem."""
    return bool(
        conn.run(
            "default", lambda s, sc: records.set_tags(s, sc, note_id=note_id, tags=tags), write=True
        )
    )


def _connect(settings, tenant: Tenant, project: str) -> Connection:
    return Connection(
        Params(
            database_url=settings.database_url or "",
            api_key=tenant.key,
            secret_key=SECRET,
            project=project,
        )
    )


def _close(conn: Connection) -> None:
    conn.release()  # the document store's share
    conn.release()  # the vector store's: the last closes the connection


async def test_keeps_backend_checks_the_records_it_stores(client, tenant, settings) -> None:
    h = tenant.project("kept")
    await declare(client, h)
    conn = _connect(settings, tenant, "kept")
    try:
        _keep_upsert(conn, "k", {"colour": "red", "level": "low", "_source": "inline"})
        with pytest.raises(tag_policy.TagRuleBroken, match="would hold 2"):
            _keep_set_tags(conn, "k", {"colour": ["red", "blue"], "level": "low"})
        with pytest.raises(tag_policy.TagRuleBroken, match="allowed: high, low"):
            _keep_upsert(conn, "k", {"colour": "red", "level": ["low", "mid"]}, summary="t")
        assert await tags_of(client, h, "k") == {"colour": "red", "level": "low"}
        assert _keep_set_tags(conn, "k", {"colour": "blue", "level": ["low", "high"]})
        assert await tags_of(client, h, "k") == {"colour": "blue", "level": ["low", "high"]}
        with pytest.raises(tag_policy.TagRuleBroken, match="does not match"):
            _keep_upsert(conn, "new", {"code": "nope"})
        assert (await client.get(path("new"), headers=h)).status_code == 404  # rolled back
        with pytest.raises(tag_policy.TagRuleBroken, match='"true" or "false"'):
            _keep_upsert(conn, ".tag/colour", {"_singular": "always"}, summary="c")
        _keep_upsert(conn, ".tag/colour", {"_singular": "false"}, summary="c")  # keep edits a rule
        assert _keep_set_tags(conn, "k", {"colour": ["blue", "red"], "level": "low"})
    finally:
        _close(conn)


KEEP_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[3])
from keep_local_driver import keeper
kp = keeper(__import__("pathlib").Path(sys.argv[1]), sys.argv[2])
out = {}
try:
    kp.put("a note with a colour", id="k", tags={"colour": "red"})
    kp.tag("k", {"colour": "blue"})
    out["colour"] = kp.get("k").tags.get("colour")
    for name, write in (
        ("keep", lambda: kp.tag("k", {"level": "mid"})),
        ("store", lambda: kp._document_store.update_tags("default", "k", {"level": "mid"})),
    ):
        try:
            write()
            out[name] = "written"
        except ValueError as exc:
            out[name] = str(exc)
    out["level"] = kp.get("k").tags.get("level")
finally:
    kp.close()
print(json.dumps(out))
"""


async def test_a_local_keep_on_keepmem_obeys_the_rules(tmp_path, settings, tenant, client) -> None:
    """keep's own Keeper in local mode with keepmem's backend: keep reads the
    rules from keepmem's notes and replaces the singular tag; the store
    refuses a record breaking them even when keep's checks are skipped."""
    from tests.test_keep_backend import LOCAL_PYTHON

    assert LOCAL_PYTHON.exists(), "run `make keep-local`"
    h = tenant.project("local")
    await declare(client, h)
    with VendorServer(Vendor(dim=16)) as vendor:
        env = environment(
            tmp_path, settings, tenant.key, KEEP_TEST_EMBEDDINGS_URL=f"{vendor.url}/v1"
        )
        ran = subprocess.run(
            [str(LOCAL_PYTHON), "-c", KEEP_SCRIPT, str(tmp_path / "keep"), "local",
             str(Path(__file__).parent)],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out["colour"] == "blue"
    assert "mid" in out["keep"] and out["keep"] != "written"
    assert "allowed: high, low" in out["store"]
    assert out["level"] is None
    assert await tags_of(client, h, "k") == {"colour": "blue"}


# -- the property: every path, random writes ---------------------------------------------------

VALUES = {
    "colour": ["red", "blue", "green"],
    "level": ["low", "high", "mid"],
    "code": ["ABC-1", "XYZ-22", "abc-1", "AB-1"],
    "topic": ["a", "b"],
}
PATHS = ("put", "tag", "batch", "import", "flow-put", "flow-tag", "keep-upsert", "keep-tags")
changes = st.fixed_dictionaries(
    {},
    optional={
        key: st.one_of(
            st.just([""]), st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True)
        )
        for key, pool in VALUES.items()
    },
)
steps = st.lists(
    st.tuples(st.sampled_from(PATHS), changes, st.sampled_from(["one text", "another text"])),
    min_size=1,
    max_size=5,
)


def _breaks(values_by_key: dict[str, list[str]]) -> bool:
    """The rules of RULES, written again here as the oracle."""
    for key, values in values_by_key.items():
        if key == "colour" and len(values) > 1:
            return True
        if key == "level" and not set(values) <= ALLOWED_LEVELS:
            return True
        if key == "code" and not all(CODE.fullmatch(v) for v in values):
            return True
    return False


def _as_sets(tags: dict[str, Any]) -> dict[str, set[str]]:
    return {k: set(tagrules.values_of(v, k)) for k, v in tags.items() if not k.startswith("_")}


def _expected(path_: str, before: dict[str, set[str]], change: dict[str, list[str]]):
    """(refused?, the tags afterwards) of one write, by the rules above."""
    adds = {k: v for k, v in change.items() if v != [""]}
    if path_ == "import":
        return _breaks(adds), {k: set(v) for k, v in adds.items()}
    if path_.startswith("keep"):
        # keep sends the whole record: its tags replaced by the change
        after = {k: v for k, v in before.items() if change.get(k) != [""]}
        after.update({k: set(v) for k, v in adds.items()})
        added = {k: sorted(set(v) - before.get(k, set())) for k, v in adds.items()}
        added = {k: v for k, v in added.items() if v}
        colour = "colour" in added and len(after["colour"]) > 1
        return colour or _breaks({k: v for k, v in added.items() if k != "colour"}), after
    after = {k: set(v) for k, v in before.items() if change.get(k) != [""]}
    for key, values in adds.items():
        after[key] = set(values) if key == "colour" else after.get(key, set()) | set(values)
    return _breaks(adds), after


@pytest.fixture
async def arena(live_url, client, make_tenant, settings):
    tenant = await make_tenant()
    h = tenant.project("arena")
    await declare(client, h)
    conn = _connect(settings, tenant, "arena")
    yield {"base": live_url, "h": h, "conn": conn}
    _close(conn)


def _state(base: str, h: dict[str, str], note_id: str) -> tuple[str, dict[str, set[str]]]:
    r = httpx.get(f"{base}{path(note_id)}", headers=h, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["summary"], _as_sets(r.json()["tags"])


def _write(
    arena: dict[str, Any], path_: str, note_id: str, change: dict[str, list[str]], text: str
) -> bool:
    """One write by ``path_``; True when it was refused by the tag rules."""
    base, h, conn = arena["base"], arena["h"], arena["conn"]
    tags = {k: v[0] if len(v) == 1 else v for k, v in change.items()}
    if path_.startswith("keep"):
        _, current = _state(base, h, note_id)
        record: dict[str, Any] = {k: sorted(v) for k, v in current.items() if change.get(k) != [""]}
        record.update({k: v for k, v in change.items() if v != [""]})
        try:
            if path_ == "keep-upsert":
                _keep_upsert(conn, note_id, record, summary=text)
            else:
                assert _keep_set_tags(conn, note_id, record)
        except tag_policy.TagRuleBroken:
            return True
        return False
    if path_ in ("flow-put", "flow-tag"):
        state, params = (
            ("put", {"id": note_id, "content": text, "tags": tags})
            if path_ == "flow-put"
            else ("tag", {"id": note_id, "tags": tags})
        )
        r = httpx.post(
            f"{base}/v1/flow", json={"state": state, "params": params}, headers=h, timeout=60
        )
        assert r.status_code == 200, r.text
        assert "error" not in json.dumps(r.json()["data"]) or flow_refused(r.json()), r.json()
        return flow_refused(r.json())
    if path_ == "batch":
        control = {"id": f"control-{uuid.uuid4().hex[:8]}", "content": "x", "tags": {"topic": "a"}}
        body = {"notes": [{"id": note_id, "content": text, "tags": tags}, control]}
        r = httpx.post(f"{base}/v1/notes/batch", json=body, headers=h, timeout=60)
        assert r.status_code == 200, r.text
        first, second = r.json()["results"]
        assert second["status"] == 200, second  # the other note is stored all the same
        status, code = first["status"], first["code"]
    elif path_ == "import":
        doc = {"id": note_id, "summary": text, "tags": tags}
        r = httpx.post(f"{base}/v1/import", json={"documents": [doc], "mode": "replace"},
                       headers=h, timeout=60)  # fmt: skip
        status, code = r.status_code, r.json().get("code")
    elif path_ == "put":
        body = {"id": note_id, "content": text, "tags": tags}
        r = httpx.post(f"{base}/v1/notes", json=body, headers=h, timeout=60)
        status, code = r.status_code, r.json().get("code")
    else:
        r = httpx.patch(f"{base}{path(note_id)}/tags", json={"set": tags}, headers=h, timeout=60)
        status, code = r.status_code, r.json().get("code")
    assert status in (200, 400), r.text
    assert status == 200 or code == "tag_rule", r.text
    return status == 400


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=steps)
def test_the_rules_hold_on_every_write_path(arena, plan) -> None:
    base, h = arena["base"], arena["h"]
    note_id = f"p-{uuid.uuid4().hex[:10]}"
    r = httpx.post(f"{base}/v1/notes", json={"id": note_id, "content": "start"}, headers=h)
    assert r.status_code == 200, r.text
    for path_, change, text in plan:
        summary, before = _state(base, h, note_id)
        expect_refused, expect_after = _expected(path_, before, change)
        was_refused = _write(arena, path_, note_id, change, text)
        summary_after, after = _state(base, h, note_id)
        assert was_refused == expect_refused, (path_, change, before, after)
        if was_refused:
            assert (summary_after, after) == (summary, before), (path_, change)
        else:
            assert after == expect_after, (path_, change, before, after)
        # the invariants, whatever the path
        assert len(after.get("colour", ())) <= 1, after
        assert after.get("level", set()) <= ALLOWED_LEVELS, after
        assert all(CODE.fullmatch(v) for v in after.get("code", ())), after
