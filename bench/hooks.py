"""What a coding agent waits for at each hook: ``keepmem-hook capture`` run
as a host runs it (one process per event, the payload on stdin).

Three cases, each over ``--runs`` PostToolUse payloads:

* **keepmem up**: how long the capture takes (the agent's wait), and when
  the event reached keepmem (the inbox row's ``received_at``, server clock)
  against the moment the capture returned (same machine, same clock): a
  positive lag says the hook returned first.
* **keepmem stopped**: the capture against a port nothing listens on.
* **SessionStart with keepmem up**: the capture that also asks for the
  resume block (the one the agent waits on by design, within 1.5 s).

    python -m bench.hooks [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from app.cli.embedded import free_port
from bench.common import machine, pct, running_stack

HOOK = [sys.executable, "-m", "keepmem_client.hooks", "capture", "--platform", "claude-code"]


def _payload(sid: str, event: str, i: int) -> dict[str, Any]:
    base = {"session_id": sid, "cwd": "/home/dev/shop", "hook_event_name": event}
    if event == "SessionStart":
        return {**base, "source": "startup"}
    return {**base, "tool_name": "Bash", "tool_input": {"command": f"echo {i}"},
            "tool_response": f"step {i}"}  # fmt: skip


def _capture(env: dict[str, str], payload: dict[str, Any]) -> tuple[float, float, str]:
    """(seconds the capture took, wall time it returned, its stdout)."""
    began = time.perf_counter()
    done = subprocess.run(
        [*HOOK, "--event", payload["hook_event_name"]],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        timeout=30,
        check=True,
    )
    return time.perf_counter() - began, time.time(), done.stdout.decode()


def _env(url: str, key: str, spool: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
    return env | {"KEEPMEM_URL": url, "KEEPMEM_API_KEY": key, "KEEPMEM_SPOOL_DIR": str(spool)}


def _ms(values: list[float]) -> str:
    return f"{pct(values, 50) * 1000:.0f} / {pct(values, 95) * 1000:.0f} / {max(values) * 1000:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with running_stack() as stack, tempfile.TemporaryDirectory() as tmp:
        stack.extra_env = {"KEEPMEM_LOG_LEVEL": "WARNING"}
        url = stack.start_api()
        _, key = stack.tenant_key("hooks")
        env = _env(url, key, Path(tmp) / "spool")
        sid = f"bench-{uuid.uuid4().hex[:8]}"
        took, returned = [], []
        for i in range(args.runs):
            seconds, at, _ = _capture(env, _payload(sid, "PostToolUse", i))
            took.append(seconds)
            returned.append(at)
            time.sleep(0.2)  # one event at a time: each its own flush
        deadline = time.monotonic() + 60
        rows: list[str] = []
        while time.monotonic() < deadline:
            rows = stack.sql(
                "SELECT string_agg(extract(epoch FROM received_at)::text, ',' ORDER BY seq) "
                f"FROM session_inbox WHERE session_id = '{sid}'"
            ).split(",")
            if len([r for r in rows if r]) >= args.runs:
                break
            time.sleep(0.5)
        arrived = [float(r) for r in rows if r]
        # Events are numbered as they arrive; a flush may carry several.
        lags = [a - r for a, r in zip(sorted(arrived), returned, strict=False)]
        start_took = []
        for i in range(max(args.runs // 3, 5)):
            seconds, _, _ = _capture(env, _payload(f"start-{i}-{sid}", "SessionStart", i))
            start_took.append(seconds)
        down = _env(f"http://127.0.0.1:{free_port()}", key, Path(tmp) / "spool-down")
        down_took = [_capture(down, _payload(sid, "PostToolUse", i))[0] for i in range(args.runs)]
        with httpx.Client(base_url=url) as http:
            ready = http.get("/v1/ready").status_code
    print(f"\n## Hooks ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(f"`python -m bench.hooks --runs {args.runs}` on {machine()}; API ready: {ready}\n")
    print("| case | p50 / p95 / max | n |\n|---|---|---|")
    print(f"| capture returns (keepmem up) | {_ms(took)} ms | {len(took)} |")
    print(f"| event reaches keepmem after the capture returned | {_ms(lags)} ms | {len(lags)} |")
    print(f"| SessionStart with the resume block (keepmem up) | {_ms(start_took)} ms | "
          f"{len(start_took)} |")  # fmt: skip
    print(f"| capture returns (keepmem stopped) | {_ms(down_took)} ms | {len(down_took)} |")
    print(f"\nevents arrived: {len(arrived)} of {args.runs}; negative lags: "
          f"{sum(1 for x in lags if x <= 0)}")  # fmt: skip


if __name__ == "__main__":
    main()
