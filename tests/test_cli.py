"""`keepmem up` end to end: a fresh data directory, curl-like calls with the
printed key, a second tenant from `keepmem admin`, clean shutdown, warm restart."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

from app.cli.embedded import free_port
from tests import upstack
from tests.upstack import CLI, clean_env


def test_up_serves_isolated_tenants_and_restarts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    stack = upstack.start(data_dir)
    try:
        url, key = stack.exports["KEEPMEM_URL"], stack.key
        assert url == stack.url and key.startswith("km_")
        assert "KEEPNOTES_API_URL" in stack.hint and "KEEPNOTES_API_KEY" in stack.hint
        h = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, timeout=30) as c:
            assert (
                c.post(
                    "/v1/notes",
                    json={"content": "first", "id": "n1", "tags": {"topic": "demo"}},
                    headers=h,
                ).status_code
                == 200
            )
            assert (
                c.post("/v1/notes", json={"content": "second", "id": "n1"}, headers=h).status_code
                == 200
            )
            assert c.get("/v1/notes/n1", headers=h).json()["summary"] == "second"
            assert c.get("/v1/notes", params={"tag": "topic=demo"}, headers=h).json()["count"] == 1
            assert (
                c.patch("/v1/notes/n1/tags", json={"set": {"k": "v"}}, headers=h).json()["tags"][
                    "k"
                ]
                == "v"
            )
            assert c.get("/v1/notes/n1/versions", headers=h).json()["count"] == 1
            assert c.get("/v1/notes/n1@V%7B1%7D", headers=h).json()["summary"] == "first"
            assert (
                c.post("/v1/notes", json={"content": "keep me", "id": "n2"}, headers=h).status_code
                == 200
            )
            assert c.delete("/v1/notes/n1", headers=h).json()["deleted"] == "n1"
            assert c.get("/v1/notes/n1", headers=h).status_code == 404

            # A second tenant, made by the admin CLI against the running stack.
            out = subprocess.run(
                [*CLI, "admin", "create-tenant", "second", "--data-dir", str(data_dir)],
                capture_output=True,
                text=True,
                env=clean_env(),
                timeout=120,
                check=True,
            ).stdout
            key2 = re.search(r"export KEEPMEM_API_KEY=(\S+)", out)
            assert key2 is not None
            # the URL printed is where this stack serves (not the default port)
            printed = re.search(r"export KEEPMEM_URL=(\S+)", out)
            assert printed is not None and printed.group(1) == url
            h2 = {"Authorization": f"Bearer {key2.group(1)}"}
            assert c.get("/v1/notes", headers=h2).json()["count"] == 0
            assert c.get("/v1/notes/n2", headers=h2).status_code == 404
            assert c.get("/v1/notes/n2", headers=h).status_code == 200
            assert c.get("/v1/ready").json()["warnings"] == []

            # The stack's worker embeds the notes in the background.
            deadline = time.monotonic() + 60
            while c.get("/v1/notes/n2", headers=h).json()["pending"]:
                assert time.monotonic() < deadline, "worker did not process the note"
                time.sleep(0.2)
            found = c.post("/v1/search", json={"query": "retain this"}, headers=h).json()
            assert found["notes"][0]["id"] == "n2"
    finally:
        log = stack.stop()
    assert stack.proc.returncode == 0 and "keepmem: stopped" in log, log[-3000:]
    assert not (data_dir / "pg" / "postmaster.pid").exists()

    # Warm restart: the data and the key survive; no new key is printed.
    stack = upstack.start(data_dir)
    try:
        assert "KEEPMEM_API_KEY" not in stack.exports
        with httpx.Client(base_url=stack.exports["KEEPMEM_URL"], timeout=30) as c:
            r = c.get("/v1/notes/n2", headers=h)
            assert r.status_code == 200 and r.json()["summary"] == "keep me"
    finally:
        log = stack.stop()
    assert stack.proc.returncode == 0, log[-3000:]


def test_second_up_on_same_data_dir_refuses(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    stack = upstack.start(data_dir)
    try:
        second = subprocess.run(
            [*CLI, "up", "--data-dir", str(data_dir), "--port", str(free_port())],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
        )
        assert second.returncode == 1
        assert "another keepmem is running" in second.stderr
    finally:
        log = stack.stop(signal.SIGTERM)
    assert stack.proc.returncode == 0 and "keepmem: stopped" in log, log[-3000:]
    assert not (data_dir / "pg" / "postmaster.pid").exists()


async def test_admin_set_quota_changes_only_what_it_names(stack, tenant) -> None:
    """`keepmem admin set-quota` as the API's PUT: a number (0 allows
    nothing), `none` (unlimited), and quotas not given stay as they are."""
    import json

    from tests.conftest import SECRET

    env = {**clean_env(), "KEEPMEM_DATABASE_URL": stack.app_url, "KEEPMEM_SECRET_KEY": SECRET}

    def set_quota(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, "admin", "set-quota", tenant.name, *flags],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    done = set_quota("--notes", "0", "--bytes", "500")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["quotas"] == {
        "notes": 0, "bytes": 500, "requests_per_day": None, "jobs_per_day": None
    }  # fmt: skip
    done = set_quota("--bytes", "none", "--jobs-per-day", "7")
    assert json.loads(done.stdout)["quotas"] == {
        "notes": 0, "bytes": None, "requests_per_day": None, "jobs_per_day": 7
    }  # fmt: skip
    refused = set_quota("--notes", "-1")
    assert refused.returncode == 2 and "whole number" in refused.stderr
