"""The TypeScript SDK (client-ts/): its generated types match the app's
OpenAPI document, and its own tests (``node --test``) pass against a live
keepmem: notes, batch, find, list paging, versions, tags, errors mapped to
classes, a real 429 retried after Retry-After, and an SSE stream.

Regenerate the types after a change to the API: ``cd client-ts && npm run
openapi`` (the document from this checkout's app, then ``npm run generate``).
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import MakeTenant, Tenant, serving
from tests.ts_sdk import TS, built, installed, need_node

GENERATED = TS / "src" / "openapi.ts"


def _generate_command(document: Path, out: Path) -> list[str]:
    """``npm run generate`` of package.json, reading ``document`` and writing
    ``out``: the locked generator with the options the package uses."""
    script = json.loads((TS / "package.json").read_text())["scripts"]["generate"]
    words = shlex.split(script)
    assert words[0] == "openapi-typescript" and "openapi.json" in words, script
    words = [str(document) if w == "openapi.json" else w for w in words]
    words = [str(out) if w == "src/openapi.ts" else w for w in words]
    return [str(TS / "node_modules" / ".bin" / words[0]), *words[1:]]


def test_generated_types_match_the_openapi_document(settings: Settings, tmp_path: Path) -> None:
    need_node()
    installed()
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(create_app(settings).openapi(), indent=1) + "\n")
    fresh = tmp_path / "openapi.ts"
    done = subprocess.run(
        _generate_command(document, fresh), cwd=TS, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    committed = GENERATED.read_text().splitlines()
    diff = list(
        difflib.unified_diff(
            committed, fresh.read_text().splitlines(), "committed", "generated", lineterm=""
        )
    )
    assert not diff, (
        "client-ts/src/openapi.ts is out of date with the API: run "
        "`cd client-ts && npm run openapi` and commit it\n" + "\n".join(diff[:60])
    )


@pytest.fixture(scope="module")
def limited_url(settings: Settings) -> Iterator[str]:
    """A second live keepmem whose keys get 60 requests a minute (one token
    a second: a drained key's Retry-After is 1 s)."""
    limited = settings.model_copy(
        update={"rate_limit_per_minute": 60, "auth_failures_per_minute": 0}
    )
    with serving(create_app(limited)) as url:
        yield url


async def _read_only_key(base: str, owner: Tenant) -> str:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        r = await http.post(
            "/v1/subkeys",
            headers=owner.headers,
            json={"name": "ts-reader", "scopes": ["read"], "expires_in_seconds": 3600},
        )
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


async def test_node_tests_pass_against_a_live_keepmem(
    live_url: str, limited_url: str, make_tenant: MakeTenant
) -> None:
    need_node()
    built()
    owner, other, limited = await make_tenant(), await make_tenant(), await make_tenant()
    env = {
        **os.environ,
        "KEEPMEM_URL": live_url,
        "KEEPMEM_API_KEY": owner.key,
        "KEEPMEM_READ_KEY": await _read_only_key(live_url, owner),
        "KEEPMEM_OTHER_KEY": other.key,
        "KEEPMEM_LIMITED_URL": limited_url,
        "KEEPMEM_LIMITED_KEY": limited.key,
        "NO_COLOR": "1",
    }
    env.pop("KEEPMEM_PROJECT", None)
    # The servers run in this process's threads: node runs beside them.
    done = subprocess.run(
        ["npm", "test"], cwd=TS, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"node --test failed:\n{output}"
    # node's summary: every test ran and passed (none skipped or left out).
    assert "# fail 0" in output and "# skipped 0" in output and "# todo 0" in output, output
