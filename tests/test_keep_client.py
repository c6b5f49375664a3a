"""The real keep client (keep-skill 0.163.4) against a live keepmem: the CLI
as a subprocess, RemoteKeeper, keep's setup-wizard check and `keep mcp`
through a real MCP client session, each with only the two environment
variables set, as a keep user would.

keep runs in its own virtualenv (``make keep-client``, which ``make test``
runs first; ``KEEPMEM_KEEP_PYTHON`` points at it). Background work (URL
fetches, embeddings) is run in this process by the same pipeline the worker
uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, Tenant
from tests.docserver import serving
from tests.test_pipeline import run_all

DEFAULT_KEEP = Path.home() / ".cache" / "keepmem" / "keep-venv" / "bin" / "python"
KEEP_PYTHON = Path(os.environ.get("KEEPMEM_KEEP_PYTHON", DEFAULT_KEEP))
DRIVER = Path(__file__).parent / "keep_driver.py"

if not KEEP_PYTHON.exists():
    if os.environ.get("KEEPMEM_SKIP_KEEP_CLIENT") == "1":
        pytest.skip(
            "keep client not installed (KEEPMEM_SKIP_KEEP_CLIENT=1)", allow_module_level=True
        )
    raise RuntimeError(
        f"keep-skill's virtualenv is missing ({KEEP_PYTHON}): run `make keep-client`"
    )


class InProject(Tenant):
    """The tenant, working in one project (for the jobs API and run_all)."""

    def __init__(self, tenant: Tenant, slug: str) -> None:
        super().__init__(id=tenant.id, name=tenant.name, key=tenant.key)
        self.slug = slug

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", "X-Project": self.slug}


@pytest.fixture
def keep_user(live_url: str, tmp_path: Path) -> tuple[Tenant, dict[str, str]]:
    """A new tenant and the environment a keep user would have."""
    r = httpx.post(
        f"{live_url}/v1/admin/tenants",
        json={"name": f"keep-{tmp_path.name}"},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert r.status_code == 201, r.text
    made = r.json()
    tenant = Tenant(
        id=made["tenant"]["id"], name=made["tenant"]["name"], key=made["api_key"]["key"]
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "KEEP_CONFIG": str(home / ".keep"),
        "KEEPNOTES_API_URL": live_url,
        "KEEPNOTES_API_KEY": tenant.key,
        "NO_COLOR": "1",
    }
    return tenant, env


def keep(env: dict[str, str], *args: str, cwd: Path | None = None, ok: bool = True) -> str:
    out = subprocess.run(
        [str(KEEP_PYTHON.parent / "keep"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if ok:
        assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout + out.stderr


def drive(mode: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [str(KEEP_PYTHON), str(DRIVER), mode, env["KEEPNOTES_API_URL"], env["KEEPNOTES_API_KEY"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


async def test_a_keep_cli_session(keep_user, tmp_path, client, make_pipeline) -> None:
    tenant, env = keep_user
    assert "auth stored." in keep(env, "put", "OAuth2 uses PKCE for public clients", "--id",
                                  "auth", "-t", "topic=auth")  # fmt: skip
    note = tmp_path / "note.txt"
    note.write_text("plain file body about harbours\n")
    assert f"file://{note} stored." in keep(env, "put", str(note), cwd=tmp_path)
    with serving() as web:
        url = web.add("/page.html", "<html><title>Tides</title><p>High tide at noon.</p></html>",
                      "text/html")  # fmt: skip
        assert f"{url} stored." in keep(env, "put", url, "-t", "kind=reference")
        pipeline = make_pipeline(fetch_allow_networks=["127.0.0.1/32"])
        outcomes = await run_all(pipeline, client, tenant)
        assert "dead" not in outcomes
    assert "High tide at noon" in keep(env, "get", url)
    keep(env, "put", "Use PKCE with S256 for every client", "--id", "auth")
    await run_all(make_pipeline(), client, tenant)  # embeddings, so find works by meaning too
    found = keep(env, "find", "PKCE")
    assert found.splitlines()[0].startswith("auth ")
    history = keep(env, "get", "auth", "--history")
    assert "@V{1}" in history and "OAuth2 uses PKCE for public clients" in history
    assert "auth tagged." in keep(env, "tag", "auth", "-t", "status=open")
    assert 'status: "open"' in keep(env, "get", "auth")
    listed = keep(env, "list")
    assert "auth" in listed and "note.txt" in listed
    keep(env, "now", "working on auth")
    assert "working on auth" in keep(env, "now")
    assert "Moved to archive." in keep(env, "move", "archive", "--source", "now")
    prompts = keep(env, "prompt", "--list")
    assert "reflect" in prompts and "query" in prompts
    reflected = keep(env, "prompt", "reflect", "PKCE")
    assert "auth" in reflected and "{find}" not in reflected
    resolved = json.loads(keep(env, "flow", "query-resolve", "-p", "query=PKCE S256"))
    # keep's own flow: a clear answer ends at its first search
    assert resolved["status"] == "done" and resolved["data"]["search"]["results"][0]["id"] == "auth"
    await _schema_as_data(env, client, tenant, make_pipeline)
    exported = tmp_path / "export.json"
    assert "Exported" in keep(env, "data", "export", str(exported))
    documents = json.loads(exported.read_text())["documents"]
    assert {"auth", "archive", url}.issubset({d["id"] for d in documents})
    copy = {**env, "KEEPNOTES_PROJECT": "copy"}
    imported = keep(copy, "data", "import", str(exported))
    assert f"Imported {len(documents)} documents" in imported
    again = tmp_path / "again.json"
    keep(copy, "data", "export", str(again))

    def shape(path: Path) -> dict:
        docs = json.loads(path.read_text())["documents"]
        return {
            d["id"]: (
                d["summary"],
                {k: v for k, v in d["tags"].items() if not k.startswith("_")},
                [v["summary"] for v in d["versions"]],
            )
            for d in docs
        }

    assert shape(again) == shape(exported)
    assert "auth deleted." in keep(env, "del", "auth")
    assert "Not found: auth" in keep(env, "get", "auth", ok=False)


async def _schema_as_data(env, client, tenant, make_pipeline) -> None:
    """The project's schema docs at work through keep's own CLI: a singular
    tag, the todo meta doc, keep's named flows with budgets and cursors, a
    project-declared edge tag and a project-added meta doc."""
    keep(env, "put", "I will ship the PKCE fix by Friday", "--id", "promise-1",
         "-t", "act=commitment", "-t", "status=open")  # fmt: skip
    await run_all(make_pipeline(), client, tenant)
    assert "promise-1" in keep(env, "get", "auth", "--meta")
    assert "promise-1 tagged." in keep(env, "tag", "promise-1", "-t", "status=fulfilled")
    shown = keep(env, "get", "promise-1")
    assert 'status: "fulfilled"' in shown and "open" not in shown, shown
    assert "promise-1" not in keep(env, "get", "auth", "--meta")
    # keep's named flows run here as in keep's own store
    for state in ("query-explore", "query-branch", "find-deep"):
        out = json.loads(keep(env, "flow", state, "-p", "query=PKCE"))
        hits = [r["id"] for b in out["bindings"].values() for r in b.get("results", [])]
        assert "auth" in hits, (state, out)
    stopped = json.loads(keep(env, "flow", "query-resolve", "-p", "query=PKCE", "-p",
                              "margin_high=2", "-p", "margin_low=2", "--budget", "1"))  # fmt: skip
    assert stopped["status"] == "stopped" and stopped["cursor"], stopped
    resumed = json.loads(keep(env, "flow", "--cursor", stopped["cursor"], "--budget", "1"))
    assert resumed["history"] == ["query-branch"] and resumed["ticks"] == 2, resumed
    # a project declares its own edge tag, and writing it makes edges and stubs
    keep(env, "put", "Tag mentor: who taught the note's author.", "--id", ".tag/mentor")
    assert "tagged." in keep(env, "tag", ".tag/mentor", "-t", "_inverse=mentee")
    keep(env, "put", "Grace showed me how to read a stack trace", "--id", "lesson-1",
         "-t", "mentor=grace")  # fmt: skip
    grace = keep(env, "get", "grace")
    assert "mentee" in grace and "lesson-1" in grace, grace
    # a project's own meta doc shows in `get --meta`
    doc = ("match: all\nrules:\n  - id: hits\n    do: find\n    with: {similar_to: "
           "'{params.item_id}', tags: {risk: high}, limit: '{params.limit}'}\n")  # fmt: skip
    keep(env, "put", doc, "--id", ".meta/risks")
    keep(env, "put", "Leaked refresh tokens stay valid for a day", "--id", "risk-1",
         "-t", "risk=high")  # fmt: skip
    meta = keep(env, "get", "auth", "--meta")
    assert "risks" in meta and "risk-1" in meta, meta


async def test_remote_keeper(keep_user, client, make_pipeline) -> None:
    tenant, env = keep_user
    driver = tenant.project("driver")
    for note_id, text in (
        ("tokens", "Refresh tokens rotate on every use"),
        ("rotation", "Rotating refresh tokens limits what a stolen token can do"),
    ):
        body = {"id": note_id, "content": text}
        if note_id == "tokens":
            body["tags"] = {"topic": "auth"}
        assert (await client.post("/v1/notes", json=body, headers=driver)).status_code == 200
    await run_all(make_pipeline(), client, InProject(tenant, "driver"))  # embedded

    got = drive("remote", env)
    assert got["put"]["id"] == "auth" and got["put"]["tags"]["topic"] == "auth"
    assert got["get"]["summary"] == "Use PKCE with S256 for every OAuth2 client"
    assert got["get_missing"] is None
    assert got["find_query"][0] == "auth"
    assert got["find_tags"] == ["auth", "tokens"]
    assert got["find_since"] == ["auth", "rotation", "tokens"]
    assert got["find_similar"][0] == "rotation"
    assert got["tag"]["tags"]["status"] == "open"
    assert got["now"]["summary"] == got["get_now"]["summary"] == "working on auth"
    assert got["move"]["id"] == "auth-archive" and got["move"]["tags"]["_saved_from"] == "now"
    assert got["context"] == {"item": "auth", "prev": [1]}
    assert got["count"] == 5  # auth, tokens, rotation, now, auth-archive
    assert got["export_header_and_ids"][0] == "header"
    assert {"auth", "tokens", "now"}.issubset(got["export_header_and_ids"])
    assert got["bundle"] == ["current_inverse", "document", "edge_tag_keys", "version_inverse"]
    assert got["changes"] > 0
    assert got["delete"] is True and got["after_delete"] is None


async def test_keep_mirror_follows_the_change_feed_by_its_opaque_cursors(keep_user) -> None:
    """keep's own markdown-mirror sync against keepmem's change feed: the
    cursor it registers and the ones it pages with are the feed's opaque
    ids (no sequence number of keepmem's), each poll brings the mirror up
    to the head, and a cursor naming no change is answered ``compacted``,
    on which keep rebuilds the mirror instead of failing on every poll."""
    _, env = keep_user
    got = drive("sync", env)
    uuid_shape = r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    assert re.match(uuid_shape, got["registered_cursor"]), got
    assert got["baseline"] == ["s-1"]
    followed = got["followed"]
    assert followed["error"] == "" and followed["mirrored"] == [f"s-{n}" for n in range(1, 6)], got
    assert followed["cursor"] == followed["head"] != got["registered_cursor"]
    assert re.match(uuid_shape, followed["cursor"])
    rebuilt = got["rebuilt"]
    assert rebuilt["error"] == "" and rebuilt["mirrored"] == [f"s-{n}" for n in range(1, 7)]
    assert rebuilt["cursor"] == rebuilt["head"] != followed["cursor"]


async def test_setup_wizard_verification(keep_user) -> None:
    _, env = keep_user
    got = drive("verify", env)
    assert got["ok"] is True, got
    assert got["bad_ok"] is False and "401" in got["bad_message"]


async def test_keep_mcp_over_stdio(keep_user) -> None:
    _, env = keep_user
    got = drive("mcp", env)
    assert {"keep_flow", "keep_prompt"}.issubset(got["tools"])
    assert not got["put"]["error"] and '"mcp-note"' in got["put"]["text"]
    resolved = json.loads(got["resolve"]["text"])
    assert resolved["status"] == "done"
    assert resolved["data"]["search"]["results"][0]["id"] == "mcp-note"
    assert "MCP note about PKCE" in got["get"]["text"]
    assert not got["prompt"]["error"] and "mcp-note" in got["prompt"]["text"]
    assert {"query", "reflect"}.issubset(got["native_prompts"])
    assert "mcp-note" in got["native_prompt_text"]
    assert json.loads(got["resource"])["id"] == "mcp-note"
    assert json.loads(got["now"])["id"] == "now"
