"""What running keep's state docs costs a keep client (issue 34), against
the embedded stack (PostgreSQL, Redis, the API process; no worker) on
127.0.0.1.

    .venv/bin/python -m bench.flows [--rounds 300] [--out FILE]

Each round sends, one after another, the requests keep's clients send and a
REST baseline doing the same work, and keeps each request's server time
(``Server-Timing: app``: the whole request in the API process, commit
included):

- ``rest put`` POST /v1/notes, and ``flow put`` POST /v1/flow state ``put``
  as keep's CLI sends it (keep's doc: the ``assess`` sub-flow with its
  ``virustotal`` fragment, then the ``put`` action): a new note each;
- ``compat get`` the flow keep's client reads a note with (answered
  directly), and ``flow get`` keep's ``get`` doc (the note, similar notes,
  parts, the six seeded meta docs run as flows, edges);
- ``context no meta`` and ``context``: GET /v1/notes/{id}/context (what
  ``keep get`` reads) without and with its meta sections (the meta docs);
- ``rest find`` POST /v1/search, and ``flow query-resolve`` keep's doc (a
  search, then keep's branches while the answer is unclear; budget 5).

Ratios are each flow's p50 over its baseline's, from the same run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, pct, running_stack
from bench.memory import code_state
from bench.sessions import timing

KINDS = (
    "rest put", "flow put", "compat get", "flow get", "context no meta", "context",
    "rest find", "flow query-resolve",
)  # fmt: skip


def _requests(i: int) -> dict[str, tuple[str, dict[str, Any]]]:
    text = f"Note {i}: the harbour ferry timetable changes in week {i % 52}."
    flow_put = {
        "content": text, "uri": None, "id": f"f{i}", "summary": None,
        "tags": {"topic": "ferry"}, "created_at": None, "force": False,
    }  # fmt: skip
    return {
        "rest put": ("/v1/notes", {"id": f"r{i}", "content": text, "tags": {"topic": "ferry"}}),
        "flow put": ("/v1/flow", {"state": "put", "params": flow_put, "writable": True}),
        "compat get": ("/v1/flow", {"state": "compat-get-item", "params": {"id": f"r{i}"}}),
        "flow get": ("/v1/flow", {"state": "get", "params": {"item_id": f"r{i}"}}),
        "context no meta": (f"/v1/notes/r{i}/context?include_meta=false", {}),
        "context": (f"/v1/notes/r{i}/context", {}),
        "rest find": ("/v1/search", {"query": f"ferry week {i % 52}", "limit": 10}),
        "flow query-resolve": (
            "/v1/flow",
            {"state": "query-resolve", "params": {"query": f"ferry week {i % 52}"}},
        ),
    }


def run(rounds: int) -> dict[str, Any]:
    with running_stack() as stack:
        url = stack.start_api()
        _, key = stack.tenant_key()
        rows: dict[str, list[float]] = {k: [] for k in KINDS}
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            for i in range(rounds):
                for kind, (path, body) in _requests(i).items():
                    r = http.get(path) if "/context" in path else http.post(path, json=body)
                    if r.status_code != 200 or (path == "/v1/flow" and "error" in r.text[:200]):
                        raise RuntimeError(f"{kind}: HTTP {r.status_code} {r.text[:300]}")
                    if i >= 10:  # the first rounds warm caches and plans
                        rows[kind].append(timing(r).get("app", float("nan")))
    out: dict[str, Any] = {}
    for kind, values in rows.items():
        out[kind] = {"p50_ms": round(pct(values, 50), 2), "p95_ms": round(pct(values, 95), 2)}
    for flow, base in (
        ("flow put", "rest put"), ("flow get", "compat get"),
        ("context", "context no meta"), ("flow query-resolve", "rest find"),
    ):  # fmt: skip
        out[f"{flow} / {base} (p50)"] = round(out[flow]["p50_ms"] / out[base]["p50_ms"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    began = time.time()
    result = {
        "command": f"python -m bench.flows --rounds {args.rounds}",
        "machine": machine(),
        "code": code_state(),
        "seconds": round(time.time() - began, 1),
        **run(args.rounds),
    }
    result["seconds"] = round(time.time() - began, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
