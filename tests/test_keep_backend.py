"""keepmem as keep's storage backend (``[store] backend = "keepmem"``): keep-skill's
real Keeper and its CLI in *local* mode, in a virtualenv holding keep-skill and
keepmem (``make keep-local``; ``KEEPMEM_KEEP_LOCAL_PYTHON`` points at it),
reading and writing the suite's embedded PostgreSQL as keepmem's application
role. What the local keep writes, the REST API sees for the same tenant and
project, and the other way round; another tenant sees nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.conftest import SECRET, Stack, Tenant
from tests.test_pipeline import run_job
from tests.vendors import Vendor, VendorServer

DEFAULT = Path.home() / ".cache" / "keepmem" / "keep-local-venv" / "bin" / "python"
LOCAL_PYTHON = Path(os.environ.get("KEEPMEM_KEEP_LOCAL_PYTHON", DEFAULT))
DRIVER = Path(__file__).with_name("keep_local_driver.py")


@pytest.fixture(scope="module")
def local_python() -> Path:
    assert LOCAL_PYTHON.exists(), (
        f"keep-skill + keepmem virtualenv missing ({LOCAL_PYTHON}): run `make keep-local`"
    )
    return LOCAL_PYTHON


def environment(home: Path, settings: Settings, key: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "KEEP_CONFIG": str(home / ".keep"),
        "NO_COLOR": "1",
        "KEEPMEM_DATABASE_URL": settings.database_url or "",
        "KEEPMEM_API_KEY": key,
        "KEEPMEM_SECRET_KEY": SECRET,
        **extra,
    }


def drive(python: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(python), str(DRIVER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


async def test_keepers_session_lands_in_keepmems_tables(
    local_python, tmp_path, settings, tenant: Tenant, other_tenant: Tenant, client, make_pipeline
) -> None:
    with VendorServer(Vendor(dim=16)) as vendor:
        env = environment(
            tmp_path, settings, tenant.key, KEEP_TEST_EMBEDDINGS_URL=f"{vendor.url}/v1"
        )
        out = drive(local_python, env, "session", str(tmp_path / "keep"), "local")
    assert out["put"] == "auth"
    assert out["get"] == {"summary": "Use PKCE with S256 for every OAuth2 client", "topic": "auth"}
    assert out["get_missing"] is True
    assert out["versions"] == ["OAuth2 uses PKCE for public clients"]
    assert out["version_1"] == "OAuth2 uses PKCE for public clients"
    assert out["find"][0] == "auth"  # full text: keep's own vectors are none yet
    assert out["find_tags"] == ["auth", "tokens"]
    assert {"auth", "tokens"} <= set(out["find_since"])
    assert out["tag"] == "open"
    assert {"auth", "tokens"} <= set(out["list"])
    assert not [i for i in out["list"] if i.startswith(".")]  # keep hides system notes
    assert out["now"] == out["get_now"] == "working on auth"
    assert out["move"] == "auth-log" and out["moved"] == "working on auth"
    assert out["revert"] == "a draft"
    assert out["import"]["imported"] == 1 and out["imported_versions"] == ["its older text"]
    assert {"auth", "auth-log", "draft", "tokens"} <= set(out["export"])
    assert len(out["analyze"]) == 8 and out["analyze"][1].startswith("Entry 2 of the harbour log")
    assert out["part_2"] == out["analyze"][1]
    assert out["delete"] is True and out["deleted"] is True

    # the same rows through the REST API, for the same tenant and project
    h = tenant.project("local")
    auth = (await client.get("/v1/notes/auth", headers=h)).json()
    assert auth["summary"] == "Use PKCE with S256 for every OAuth2 client"
    assert auth["tags"]["topic"] == "auth" and auth["tags"]["status"] == "open"
    history = (await client.get("/v1/notes/auth/versions", headers=h)).json()
    assert [v["summary"] for v in history["versions"]] == ["OAuth2 uses PKCE for public clients"]
    assert (await client.get("/v1/notes/tokens", headers=h)).status_code == 404
    parts = (await client.get("/v1/notes/harbour/parts", headers=h)).json()
    assert [p["summary"] for p in parts["parts"]] == out["analyze"]
    # keep embedded the parts itself: stored under keep's model, not keepmem's
    assert out["part_vectors"] == 8 and out["keep_collection"].startswith("openai")
    imported = (await client.get("/v1/notes/imported", headers=h)).json()
    assert imported["created_at"].startswith("2024-01-01")
    # keepmem's workers embed what the local keep wrote: found by meaning over REST
    pending = await client.get("/v1/jobs", params={"status": "pending"}, headers=h)
    pipeline = make_pipeline()
    outcomes = [await run_job(pipeline, tenant, j["id"]) for j in reversed(pending.json()["jobs"])]
    assert outcomes and set(outcomes) == {"done"}, outcomes
    r = await client.post(
        "/v1/search", json={"query": "how should OAuth clients prove possession"}, headers=h
    )
    assert r.json()["mode"] == "hybrid" and r.json()["notes"][0]["id"] == "auth"

    # and what the REST API writes, the local keep reads
    note = {"id": "from-rest", "content": "Written over HTTP", "tags": {"via": "api"}}
    r = await client.post("/v1/notes", json=note, headers=h)
    assert r.status_code == 200, r.text
    got = drive(local_python, env, "get", str(tmp_path / "keep"), "local", "from-rest")
    assert got["item"]["summary"] == "Written over HTTP" and got["item"]["tags"]["via"] == "api"

    # another tenant's key, same project name: nothing of the first tenant's
    theirs = environment(tmp_path / "other", settings, other_tenant.key)
    seen = drive(local_python, theirs, "get", str(tmp_path / "other-keep"), "local", "auth")
    assert seen["item"] is None
    r = await client.get("/v1/notes/auth", headers=other_tenant.project("local"))
    assert r.status_code == 404


def test_the_backend_refuses_the_owner_role_and_missing_settings(
    local_python, tmp_path, stack: Stack, settings, tenant: Tenant
) -> None:
    owner = environment(tmp_path, settings, tenant.key, KEEPMEM_DATABASE_URL=stack.owner_url)
    out = drive(local_python, owner, "open", str(tmp_path / "a"), "local")
    assert "application role" in out["error"], out
    bare = environment(tmp_path, settings, tenant.key)
    del bare["KEEPMEM_SECRET_KEY"]
    out = drive(local_python, bare, "open", str(tmp_path / "b"), "local")
    assert "secret_key" in out["error"] and "KEEPMEM_SECRET_KEY" in out["error"], out
    wrong = environment(tmp_path, settings, "km_not_a_real_key")
    out = drive(local_python, wrong, "open", str(tmp_path / "c"), "local")
    assert "error" in out and "key" in out["error"].lower(), out


def keep_cli(python: Path, env: dict[str, str], *args: str, ok: bool = True) -> str:
    out = subprocess.run(
        [str(python.parent / "keep"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if ok:
        assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout + out.stderr


async def test_the_keep_cli_in_local_mode_on_keepmem(
    local_python, tmp_path, settings, tenant: Tenant, client
) -> None:
    """The keep-compat session (put, find, get with history, tag, list, now,
    delete) with the CLI's own daemon on keepmem's storage backend. keep needs
    an embedding provider configured: its OpenAI client, at a local server."""
    with VendorServer(Vendor(dim=16)) as vendor:
        home = tmp_path / "home"
        (home / ".keep").mkdir(parents=True)
        (home / ".keep" / "keep.toml").write_text(
            '[store]\nbackend = "keepmem"\n\n[store.backend_params]\nproject = "cli"\n\n'
            '[embedding]\nname = "openai"\nmodel = "text-embedding-3-small"\n'
            f'base_url = "{vendor.url}/v1"\napi_key = "local-test"\n'
        )
        env = environment(home, settings, tenant.key)
        try:
            first = (
                "put",
                "OAuth2 uses PKCE for public clients",
                "--id",
                "auth",
                "-t",
                "topic=auth",
            )
            assert "auth stored." in keep_cli(local_python, env, *first)
            keep_cli(
                local_python, env, "put", "Use PKCE with S256 for every client", "--id", "auth"
            )
            assert keep_cli(local_python, env, "find", "PKCE").splitlines()[0].startswith("auth ")
            history = keep_cli(local_python, env, "get", "auth", "--history")
            assert "@V{1}" in history and "OAuth2 uses PKCE for public clients" in history
            assert "auth tagged." in keep_cli(local_python, env, "tag", "auth", "-t", "status=open")
            assert 'status: "open"' in keep_cli(local_python, env, "get", "auth")
            assert "auth" in keep_cli(local_python, env, "list")
            keep_cli(local_python, env, "now", "working on auth")
            assert "working on auth" in keep_cli(local_python, env, "now")
            h = tenant.project("cli")
            seen = (await client.get("/v1/notes/auth", headers=h)).json()
            assert seen["tags"]["status"] == "open" and "S256" in seen["summary"]
            assert "auth deleted." in keep_cli(local_python, env, "del", "auth")
            assert "Not found: auth" in keep_cli(local_python, env, "get", "auth", ok=False)
            assert (await client.get("/v1/notes/auth", headers=h)).status_code == 404
        finally:
            keep_cli(local_python, env, "daemon", "--stop", ok=False)
        # the daemon's embedding requests reached the local server, not a hosted one
        assert any(r["path"].endswith("/embeddings") for r in vendor.vendor.requests)


def test_the_entry_point_is_registered(local_python) -> None:
    out = subprocess.run(
        [str(local_python), "-c",
         "from importlib.metadata import entry_points;"
         "print([e.value for e in entry_points(group='keep.backends') if e.name == 'keepmem'])"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "['app.keepstore:create_stores']"


async def test_the_stores_keep_keeps_contract(
    local_python, tmp_path, settings, tenant: Tenant, client
) -> None:
    """The two stores on their own (keep's ``create_stores``), method by method,
    with keep's semantics: versions on upsert, tag values deduplicated as keep
    does, updates of missing notes False, restore, hash / glob / tag lookups,
    keep's own vectors under keep's model identity (a vector without its note
    is not kept), and a closed store refuses calls."""
    env = environment(tmp_path, settings, tenant.key)
    out = drive(local_python, env, "contract", str(tmp_path / "keep"), "contract")
    assert out["is_local"] is False
    assert out["new"] == ["doc:1", "Version 1", {"tag": "a"}, False]
    assert out["changed"] == ["Version 2", True, True]
    assert out["versions"] == [[1, "Version 1", "a"]]
    assert out["dedup"] == {"k": ["v1", "v2"], "one": "x"}
    assert out["update_summary"] == [True, False] and out["update_tags"] == [True, False]
    assert out["after_updates"] == ["New", {"new": "t"}]
    assert out["get_many"] == ["doc:1", "doc:2"] and out["by_hash"] == "doc:1"
    assert out["glob"] == out["prefix"] == ["doc:1", "doc:2"]
    assert out["tag_value"] == ["doc:2"] and out["tag_key"] == ["doc:1"]
    assert {"new", "tag"} <= set(out["tag_keys"]) and out["tag_values"] == ["b"]
    assert out["restore"] == "Version 1" and out["restore_none"] is None
    assert out["fts"] == ["doc:1"]
    assert out["parts"] == 2 and out["part_tags"] is True
    assert out["part_list"] == [
        [1, "Opening about tides", {"kind": "intro"}],
        [2, "Harbour dues", {"kind": "fees"}],
    ]
    assert out["part_fts"] == ["doc:1@p2"]
    assert [n[0] for n in out["near"]] == ["doc:1", "doc:2"] and out["near"][0][1] < 0.01
    assert out["embedding"] == [0.0, 1.0, 0.0]
    assert out["vector_ids"] == ["doc:1", "doc:2"] and out["missing"] == ["doc:3"]
    assert out["other_model"] == [] and out["vec_delete"] == [True, False]
    assert out["delete"] == [True, False, False]
    assert out["after_close"] == "this keepmem store is closed"
    # keep's vectors sit beside keepmem's, under their own model name
    r = await client.get("/v1/notes/doc:2", headers=tenant.project("contract"))
    assert r.json()["summary"] == "New"
    r = await client.get("/v1/notes/doc:1/parts", headers=tenant.project("contract"))
    assert r.status_code == 404  # deleted with its parts at the end


async def test_a_read_only_key_reads_and_cannot_write(
    local_python, tmp_path, settings, tenant: Tenant, client
) -> None:
    h = tenant.project("shared")
    r = await client.post("/v1/notes", json={"id": "shared", "content": "Team note"}, headers=h)
    assert r.status_code == 200, r.text
    made = await client.post("/v1/keys", json={"name": "reader", "scopes": ["read"]}, headers=h)
    reader = made.json()["key"]
    out = drive(local_python, environment(tmp_path, settings, reader), "readonly",
                str(tmp_path / "keep"), "shared")  # fmt: skip
    assert out["get"] == "Team note"
    for name in ("upsert", "vector", "delete"):
        assert "lacks the 'write' scope" in out[name], out
    assert (await client.get("/v1/notes/shared", headers=h)).json()["summary"] == "Team note"
    assert (await client.get("/v1/notes/mine", headers=h)).status_code == 404
