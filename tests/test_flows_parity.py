"""keep's named flows answer alike on keepmem and on keep's own local store
(issue 34).

Every named state keep-skill 0.163.4 ships (``.state/<name>`` in its
package data) runs with the same params against the same notes twice: on
keep's ``Keeper`` with its local sqlite and Chroma store, in keep's own
virtualenv (tests/keep_parity_driver.py, one subprocess for every case),
and through keepmem's ``POST /v1/flow`` on a fresh project per case. The
answers are compared by shape: status, history, ticks and tried queries,
the binding names, each binding's keys, the keys of ``data``, and by value
where neither store's scoring decides it: the notes read and written (ids,
summaries, user tags), counts, listings, the top hit and the hit set of a
search that returns every note, the groups of a traversal, the reasons of
an error or a stop.

keep needs an embedding provider and nothing can be downloaded here: the
test serves keepmem's own MiniLM as an OpenAI-compatible ``/v1/embeddings``
endpoint, so both stores rank with the same vectors (the scores still
differ: keep's local search mixes in full text its own way).

Where keepmem answers differently on purpose, the check says why; any
other difference fails the case.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.flows.runtime import decode_cursor
from tests.conftest import Tenant
from tests.test_pipeline import put, run_all
from tests.vendors import Vendor, VendorServer

DEFAULT_KEEP = Path.home() / ".cache" / "keepmem" / "keep-venv" / "bin" / "python"
KEEP_PYTHON = Path(os.environ.get("KEEPMEM_KEEP_PYTHON", DEFAULT_KEEP))
DRIVER = Path(__file__).with_name("keep_parity_driver.py")

if not KEEP_PYTHON.exists():
    if os.environ.get("KEEPMEM_SKIP_KEEP_CLIENT") == "1":
        pytest.skip(
            "keep client not installed (KEEPMEM_SKIP_KEEP_CLIENT=1)", allow_module_level=True
        )
    raise RuntimeError(
        f"keep-skill's virtualenv is missing ({KEEP_PYTHON}): run `make keep-client`"
    )

# The notes both stores hold: "auth" has a version, "tokens" an edge tag
# (speaker: both stores make the stub "alice"), "promise-1" is an open
# commitment (the todo meta section of `get`).
NOTES: list[dict[str, Any]] = [
    {"id": "auth", "content": "OAuth2 uses PKCE for public clients", "tags": {"topic": "auth"}},
    {"id": "auth", "content": "Use PKCE with S256 for every OAuth2 client",
     "tags": {"topic": "auth"}},
    {"id": "tokens", "content": "Refresh tokens rotate on every use",
     "tags": {"topic": "auth", "speaker": "alice"}},
    {"id": "tide", "content": "The harbour tide is high at noon", "tags": {"topic": "sea"}},
    {"id": "promise-1", "content": "I will ship the login fix by Friday",
     "tags": {"act": "commitment", "status": "open"}},
    {"id": "scratch", "content": "A scratch note to be renamed", "tags": {"topic": "misc"}},
    {"id": "doomed", "content": "A note that will be deleted", "tags": {"topic": "misc"}},
]  # fmt: skip
STORED = {n["id"] for n in NOTES}

CLEAR = "PKCE S256 OAuth2 client"
# every search returns every note (6 < 10), so its hit set is the same in
# both stores whatever their scores
WIDE = {"pivot_limit": 10, "bridge_limit": 10}
# thresholds no result set meets: the query flows go round until the budget
# ends, whatever either store's scores are
NEVER_SURE = {"margin_high": 2, "margin_low": 2, "lineage_strong": 2}
LOOPING = {"query": "PKCE", **WIDE, **NEVER_SURE}


@dataclass(frozen=True)
class Case:
    name: str
    state: str
    params: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None
    resume: str | None = None  # resume the cursor this earlier case stopped with


# In the order keep runs them on its one store: reads first, then each write
# on a note no other case reads (keepmem runs each case on a fresh project).
CASES = [
    Case("stats", "stats", {"top_k": 50}),
    Case("get", "get", {"item_id": "auth"}),
    Case("get-prompt", "get", {"item_id": "auth", "prompt": CLEAR}),
    Case("list", "list", {"tags": {"topic": "auth"}}),
    Case("list-state-docs", "list", {"prefix": ".state/", "include_hidden": True, "limit": 100}),
    Case("list_versions", "list_versions", {"id": "auth"}),
    Case("list_versions-item_id", "list_versions", {"item_id": "auth"}),
    Case("find-deep", "find-deep", {"query": CLEAR}),
    Case("find-deep-no-query", "find-deep"),
    Case("memory-search", "memory-search", {"query": CLEAR}),
    Case("memory-search-no-query", "memory-search"),
    Case("query-resolve", "query-resolve", {"query": CLEAR, **WIDE}),
    Case("query-resolve-no-query", "query-resolve"),
    Case("query-resolve-loop", "query-resolve", LOOPING),
    Case("query-resolve-budget", "query-resolve", LOOPING, budget=1),
    Case("query-resolve-resumed", "query-resolve", LOOPING, budget=1,
         resume="query-resolve-budget"),
    # `keep flow --cursor X` sends no params: neither store keeps them in a
    # cursor. (keep's local cursor is spent once read, so this resumes its own.)
    Case("query-resolve-budget-again", "query-resolve", LOOPING, budget=1),
    Case("query-resolve-resumed-bare", "query-resolve", budget=1,
         resume="query-resolve-budget-again"),
    Case("query-branch", "query-branch", {"query": CLEAR, **WIDE}),
    Case("query-branch-loop", "query-branch", LOOPING),
    Case("query-explore", "query-explore", {"query": CLEAR, **WIDE}),
    Case("query-explore-loop", "query-explore", LOOPING),
    Case("assess", "assess", {"id": "assessed", "content": "to assess", "tags": {"k": "v"}}),
    Case("after-write", "after-write", {"item_id": "auth"}),
    # as keep calls it after a put: the note in view, so its rules fire (and
    # the first LLM action, auto_tag, stops the foreground flow)
    Case("after-write-item", "after-write", {"item_id": "auth", "item": {
        "id": "auth", "uri": "", "content_type": "text/markdown", "content_length": 42,
        "summary": "Use PKCE with S256 for every OAuth2 client", "tags": {"topic": "auth"}},
        "system": {"has_media_provider": False}}),
    Case("review-supernodes", "review-supernodes", {"item_id": "alice", "fan_in": 1}),
    Case("put", "put", {"id": "fresh", "content": "A fresh note about PKCE",
                        "tags": {"topic": "auth"}}),
    Case("stub", "stub", {"id": "bob", "tags": {"topic": "people"}}),
    Case("tag", "tag", {"id": "tokens", "tags": {"priority": "high"}}),
    Case("tag-remove", "tag", {"id": "tide", "remove": ["topic"]}),
    Case("move", "move", {"name": "scratch-archive", "source": "scratch"}),
    Case("delete", "delete", {"id": "doomed"}),
]  # fmt: skip
BY_NAME = {c.name: c for c in CASES}
SHIPPED_STATES = {
    "after-write", "assess", "delete", "find-deep", "get", "list", "list_versions",
    "memory-search", "move", "put", "query-branch", "query-explore", "query-resolve",
    "review-supernodes", "stats", "stub", "tag",
}  # fmt: skip


class MiniLMVendor(Vendor):
    """An OpenAI-compatible embeddings endpoint answering with keepmem's
    MiniLM vectors (keep's OpenAI SDK sends one string or a list)."""

    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.encoder = encoder

    def reply(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if not path.endswith("/embeddings"):
            return super().reply(path, headers, body)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self.lock:  # the encoder serves one thread at a time
            vectors = self.encoder.encode([str(t) for t in texts])
        data = [
            {"object": "embedding", "index": i, "embedding": v.tolist()}
            for i, v in enumerate(vectors)
        ]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return 200, {"object": "list", "model": body.get("model"), "data": data, "usage": usage}


def _stop_keeps_processor(store: Path) -> None:
    """keep's local Keeper starts background processors (``keep.daemon
    --store <store>``) that outlive the driver: stop them, so no process is
    left behind."""
    mine = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"keep.daemon" in cmdline and str(store).encode() in cmdline:
            mine.append(int(proc.name))
    for pid in mine:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for pid in mine:
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def keep_answers(minilm: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case on keep's own local store, in one subprocess."""
    home = tmp_path_factory.mktemp("keep-parity")
    spec = {
        "notes": NOTES,
        "cases": [
            {"name": c.name, "state": c.state, "params": c.params, "budget": c.budget,
             "resume": c.resume}
            for c in CASES
        ],
    }  # fmt: skip
    with VendorServer(MiniLMVendor(minilm.encoder)) as vendor:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "NO_COLOR": "1",
            # the OpenAI SDK's own setting (see the driver); and no VirusTotal
            # key, as keepmem has none
            "OPENAI_BASE_URL": f"{vendor.url}/v1",
        }
        out = subprocess.run(
            [str(KEEP_PYTHON), str(DRIVER), str(home / ".keep")],
            input=json.dumps(spec),
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    _stop_keeps_processor(home / ".keep" / "store")
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    answers: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return answers


@pytest.fixture(scope="module")
def seen() -> dict[str, dict[str, Any]]:
    """keepmem's answers by case, so test_known_mismatch reuses test_parity's."""
    return {}


def flow_body(case: Case) -> dict[str, Any]:
    body: dict[str, Any] = {"state": case.state, "params": case.params}
    if case.budget is not None:
        body["budget"] = case.budget
    return body


async def keepmem_answer(
    client: Any, make_tenant: Any, make_pipeline: Any, case: Case, seen: dict[str, Any]
) -> dict[str, Any]:
    """The case on a new tenant's project holding the same notes, embedded."""
    if case.name in seen:
        return dict(seen[case.name])
    tenant: Tenant = await make_tenant()
    for note in NOTES:
        await put(client, tenant, **note)
    await run_all(make_pipeline(), client, tenant)
    body = flow_body(case)
    if case.resume is not None:
        first = BY_NAME[case.resume]
        r = await client.post("/v1/flow", json=flow_body(first), headers=tenant.headers)
        body["cursor_token"] = r.json()["cursor"]
    r = await client.post("/v1/flow", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    seen[case.name] = r.json()
    return dict(seen[case.name])


# -- comparing ---------------------------------------------------------------------------


class Diff:
    """The differences found, each as ``where: keep X, keepmem Y``."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def check(self, where: str, keep: Any, mine: Any) -> None:
        if keep != mine:
            self.found.append(f"{where}: keep {keep!r}, keepmem {mine!r}")


def _ids(results: list[dict[str, Any]]) -> list[str]:
    return [str(r.get("id")) for r in results]


def _kinds(results: list[dict[str, Any]]) -> set[str]:
    return {"null" if r.get("score") is None else "number" for r in results}


def _user(tags: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in tags.items() if not k.startswith("_")}


def _results(diff: Diff, where: str, keep: list[dict], mine: list[dict]) -> None:
    """A result list: the same entry keys and score kinds, the same notes."""
    if keep and mine:
        diff.check(f"{where} result keys", sorted(keep[0]), sorted(mine[0]))
        diff.check(f"{where} score kinds", _kinds(keep), _kinds(mine))
    diff.check(f"{where} ids", sorted(_ids(keep)), sorted(_ids(mine)))


def _note(diff: Diff, where: str, keep: dict[str, Any], mine: dict[str, Any]) -> None:
    """A note read or written: what the stores agree on, not their own
    system tags (timestamps, hashes)."""
    for key in ("id", "summary", "changed"):
        if key in keep:
            diff.check(f"{where}.{key}", keep[key], mine.get(key))
    diff.check(f"{where} user tags", _user(keep["tags"]), _user(mine.get("tags") or {}))
    for tag in ("_source", "_saved_from"):
        diff.check(f"{where}.{tag}", keep["tags"].get(tag), (mine.get("tags") or {}).get(tag))


def _binding(diff: Diff, name: str, keep: Any, mine: Any) -> None:
    where = f"bindings.{name}"
    if not isinstance(keep, dict) or not isinstance(mine, dict):
        diff.check(where, keep, mine)
        return
    diff.check(f"{where} keys", sorted(keep), sorted(mine))
    if "count" in keep:
        diff.check(f"{where}.count", keep["count"], mine.get("count"))
    if isinstance(keep.get("results"), list) and name != "similar":
        results = mine.get("results") or []
        _results(diff, where, keep["results"], results)
        if keep.get("margin") is not None and keep["results"] and results:
            diff.check(f"{where} top hit", keep["results"][0]["id"], results[0]["id"])
    if isinstance(keep.get("groups"), dict):
        groups = mine.get("groups") or {}
        diff.check(f"{where} group names", sorted(keep["groups"]), sorted(groups))
        for source, found in keep["groups"].items():
            _results(diff, f"{where}.{source}", found, groups.get(source) or [])
    if isinstance(keep.get("sections"), dict):
        sections = mine.get("sections") or {}
        diff.check(f"{where} section names", sorted(keep["sections"]), sorted(sections))
        for section, found in keep["sections"].items():
            _results(diff, f"{where}.{section}", found, sections.get(section) or [])
    if isinstance(keep.get("versions"), list):
        theirs = mine.get("versions") or []
        diff.check(
            f"{where} versions",
            [(v["offset"], v["summary"]) for v in keep["versions"]],
            [(v["offset"], v["summary"]) for v in theirs],
        )
    if {"id", "summary", "tags"} <= keep.keys():
        _note(diff, where, keep, mine)
    if "items" in keep:  # tag: every note tagged
        diff.check(f"{where}.ids", keep.get("ids"), mine.get("ids"))
        for n, (a, b) in enumerate(zip(keep["items"], mine.get("items") or [], strict=False)):
            _note(diff, f"{where}.items[{n}]", a, b)
    if "assessment" in keep or "deleted" in keep or "edges" in keep:
        # pass-through directives, a deletion, the edges: values, not scores
        for key, value in keep.items():
            diff.check(f"{where}.{key}", value, mine.get(key))


def compare(keep: dict[str, Any], mine: dict[str, Any]) -> Diff:
    assert "exception" not in keep, keep
    diff = Diff()
    for key in ("status", "history", "ticks", "tried_queries"):
        diff.check(key, keep[key], mine[key])
    diff.check("binding names", sorted(keep["bindings"]), sorted(mine["bindings"]))
    for name, value in keep["bindings"].items():
        if name in mine["bindings"]:
            _binding(diff, name, value, mine["bindings"][name])
    data, theirs = keep["data"], mine["data"]
    diff.check("data keys", sorted(data) if data else data, sorted(theirs) if theirs else theirs)
    if isinstance(data, dict) and isinstance(theirs, dict):
        if ("reason" in data and "results" not in data) or "assessment" in data:
            for key, value in data.items():  # why it ended; a verdict
                diff.check(f"data.{key}", value, theirs.get(key))
        if isinstance(data.get("results"), list):
            _results(diff, "data", data["results"], theirs.get("results") or [])
    diff.check("cursor given", keep["cursor"] is not None, mine["cursor"] is not None)
    return diff


def cursors_differ_on_purpose(keep: dict[str, Any], mine: dict[str, Any]) -> None:
    """keep's local Keeper stores a stopped flow's cursor as a `.cursor/<id>`
    note and answers its 12-character id; keepmem answers the whole cursor
    (base64url JSON: the state to run, the ticks, the bindings), so any of
    its API servers can resume it without a shared store."""
    if keep["cursor"] is None:
        return
    assert re.fullmatch(r"[0-9a-f]{12}", keep["cursor"]), keep["cursor"]
    decoded = decode_cursor(mine["cursor"])
    assert decoded is not None and decoded.ticks == mine["ticks"], mine["cursor"]


def get_on_purpose(keep: dict[str, Any], mine: dict[str, Any]) -> None:
    """`similar` (the get doc's rule when no prompt is given): keep's local
    store embeds a note's old versions too, so the note in view comes back
    as similar to itself through its version 1 (``_focus_version``);
    keepmem leaves the note in view out. The other hits are ranked by each
    store's own scores: the best of them is the same."""
    similar = keep["bindings"].get("similar")
    if similar is None:
        assert "similar" not in mine["bindings"]
        return
    assert "auth" not in _ids(mine["bindings"]["similar"]["results"])
    others = [i for i in _ids(similar["results"]) if i != "auth"]
    assert others[0] == _ids(mine["bindings"]["similar"]["results"])[0] == "tokens"


def stats_on_purpose(keep: dict[str, Any], mine: dict[str, Any]) -> None:
    """A store profile: its numbers count what the store holds. keep's
    counts its ~110 system docs too; keepmem counts the user's notes only
    (the six notes and the stub "alice"), so the totals, sources and date
    histograms differ; the keys, the user tags' entries, versions and edges
    do not."""
    a, b = keep["bindings"]["profile"], mine["bindings"]["profile"]
    assert b["total"] == len(STORED) + 1 < a["total"]
    assert sorted(a) == sorted(b)
    for key in ("dates", "structure"):
        assert sorted(a[key]) == sorted(b[key]), key
    for key in ("with_versions", "versions_len", "with_parts", "parts_len", "edges"):
        assert a["structure"][key] == b["structure"][key], key
    assert set(b["all_tags"]) <= set(a["all_tags"])
    for tag in ("topic", "speaker", "act", "status"):
        assert sorted(a["tags"][tag]) == sorted(b["tags"][tag]), tag
        assert a["tags"][tag]["edge"] == b["tags"][tag]["edge"] == (tag == "speaker")


ON_PURPOSE = {"get": get_on_purpose, "get-prompt": get_on_purpose, "stats": stats_on_purpose}


# -- the tests ---------------------------------------------------------------------------


def test_every_named_state_keep_ships_is_a_case(keep_answers) -> None:
    shipped = {
        p.name.removeprefix("state-").removesuffix(".md")
        for p in KEEP_PYTHON.parent.parent.glob("lib/python*/site-packages/keep/data/system/*")
        if p.name.startswith("state-") and p.name.endswith(".md")
    }
    assert shipped == SHIPPED_STATES
    assert {c.state for c in CASES} == shipped
    # keep's store holds each (test_parity[list-state-docs] finds the same
    # docs and fragments seeded in a keepmem project)
    listed = keep_answers["list-state-docs"]["bindings"]["results"]["results"]
    assert {i.removeprefix(".state/") for i in _ids(listed)} >= shipped


@pytest.mark.parametrize("name", [c.name for c in CASES])
async def test_parity(name, keep_answers, seen, client, make_tenant, make_pipeline) -> None:
    keep = keep_answers[name]
    mine = await keepmem_answer(client, make_tenant, make_pipeline, BY_NAME[name], seen)
    diff = compare(keep, mine)
    assert diff.found == []
    cursors_differ_on_purpose(keep, mine)
    if name in ON_PURPOSE:
        ON_PURPOSE[name](keep, mine)
