"""Schemathesis (the real tool, its CLI) against a live keepmem: every
operation of the OpenAPI document, all checks, a bounded number of examples;
once with a tenant's key, once with the admin token. Zero failures.

The server runs in a thread with its own event loop, as uvicorn runs it in
production, against the suite's PostgreSQL and Redis.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import ADMIN_TOKEN

CONFIG = Path(__file__).parent / "schemathesis" / "schemathesis.toml"
ST = Path(sys.executable).parent / "st"
MAX_EXAMPLES = os.environ.get("KEEPMEM_SCHEMATHESIS_EXAMPLES", "20")
# Seed 20261123 made Hypothesis 6.170.15 itself crash in its target phase
# (IndexError in the optimiser's hill climb, on GET /v1/notes/{note_id}/detail,
# once issue 35's routes changed the document): a fault of the tool's
# optimiser, reproducible with that seed, not an answer of keepmem's.
SEED = os.environ.get("KEEPMEM_SCHEMATHESIS_SEED", "20261126")


def _run(
    url: str, token: str, *paths: str, authorization: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "run",
        f"{url}/openapi.json",
        # every check: all are on by default, and the config file can then
        # still tune one per operation (a --checks option would override it)
        "--max-examples",
        MAX_EXAMPLES,
        "--seed",
        SEED,
        # the same seed, the same cases: nothing carried over from earlier runs
        "--generation-database",
        "none",
        "--no-color",
        "-H",
        f"Authorization: {authorization or f'Bearer {token}'}",
        *paths,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)


def _summary(out: subprocess.CompletedProcess[str]) -> str:
    text = out.stdout + out.stderr
    return text[-12000:]


def _tenant_key(url: str) -> str:
    r = httpx.post(
        f"{url}/v1/admin/tenants",
        json={"name": f"st-{time.time_ns()}"},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["api_key"]["key"])


def test_schemathesis_with_a_tenant_key(live_url: str) -> None:
    # The key routes run on their own (below): Schemathesis revokes the keys
    # it finds, its own included, and the rest would then see only 401s.
    # Revocation and introspection authenticate an OAuth client, not a
    # tenant key, and MCP wants its Accept header: both have runs of their
    # own (below), as does mem0's API (its own Authorization scheme). An
    # event stream never ends by design (tests/test_events.py
    # covers its input); /metrics takes the operator's token.
    out = _run(
        live_url,
        _tenant_key(live_url),
        "--exclude-path-regex",
        "^/(v1/(admin|keys|events)|oauth/(revoke|introspect)|metrics|mcp$|mem0/)",
    )
    assert out.returncode == 0, _summary(out)
    assert "Authentication failed" not in out.stdout, _summary(out)
    tested = re.search(r"Tested: (\d+)", out.stdout)
    assert tested and int(tested.group(1)) >= 25, _summary(out)  # every tenant operation


def test_schemathesis_on_key_management(live_url: str) -> None:
    out = _run(live_url, _tenant_key(live_url), "--include-path-regex", "^/v1/keys")
    assert out.returncode == 0, _summary(out)


def test_schemathesis_with_the_admin_token(live_url: str) -> None:
    out = _run(live_url, ADMIN_TOKEN, "--include-path-regex", "^/v1/admin")
    assert out.returncode == 0, _summary(out)


def test_schemathesis_on_mcp(live_url: str) -> None:
    """MCP's JSON-RPC endpoint as an MCP client calls it (its Accept header:
    the transport's rule). The GET event stream never ends by design
    (tests/test_mcp_http.py covers its cap and its end)."""
    out = _run(
        live_url,
        _tenant_key(live_url),
        "-H",
        "Accept: application/json, text/event-stream",
        "--include-path-regex",
        "^/mcp$",
        "--exclude-method",
        "GET",
    )
    assert out.returncode == 0, _summary(out)
    assert re.search(r"Tested: 1\b", out.stdout), _summary(out)


def test_schemathesis_on_the_oauth_client_endpoints(live_url: str) -> None:
    """Token, revocation and introspection authenticate an OAuth client
    (HTTP Basic with a registered client's secret), and registration needs
    no credentials at all."""
    r = httpx.post(
        f"{live_url}/oauth/register",
        json={"redirect_uris": ["https://app.example/cb"], "client_name": "schemathesis"},
    )
    assert r.status_code == 201, r.text
    client = r.json()
    basic = base64.b64encode(f"{client['client_id']}:{client['client_secret']}".encode())
    out = _run(
        live_url,
        "",
        "--include-path-regex",
        "^/oauth/(token|revoke|introspect|register)$",
        authorization=f"Basic {basic.decode()}",
    )
    assert out.returncode == 0, _summary(out)
    tested = re.search(r"Tested: (\d+)", out.stdout)
    assert tested and int(tested.group(1)) == 4, _summary(out)


def test_schemathesis_on_the_mem0_api(live_url: str) -> None:
    """mem0's hosted API (/mem0) with a key sent as mem0's client sends it."""
    out = _run(
        live_url,
        "",
        "--include-path-regex",
        "^/mem0/",
        authorization=f"Token {_tenant_key(live_url)}",
    )
    assert out.returncode == 0, _summary(out)
    assert "Authentication failed" not in out.stdout, _summary(out)
    tested = re.search(r"Tested: (\d+)", out.stdout)
    assert tested and int(tested.group(1)) == 13, _summary(out)  # every mem0 operation
