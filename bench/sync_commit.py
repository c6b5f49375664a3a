"""Write latency with synchronous commit to a standby on and off (issue 38).

One ``keepmem up --replicas 1`` stack; the primary's
``synchronous_standby_names`` is switched between rounds (a reload, no
restart), the two modes alternating so that the machine's load drifts over
both alike. Measured in each round: ``POST /v1/notes`` through the API
(client wall time, ``--clients`` writers at once) and a bare one-row commit
on the primary over its socket (asyncpg, one connection), which isolates
what the standby's round trip adds to a commit.

    .venv/bin/python -m bench.sync_commit [--rounds 4] [--writes 100] [--clients 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from app.cli import replication
from app.cli.embedded import free_port
from bench.common import machine, pct

CLI = [sys.executable, "-c", "from app.cli import main; main()"]


def start(data_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
    env |= {"KEEPMEM_GRAPH_PROVIDER": "none", "KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB": "256"}
    proc = subprocess.Popen(
        [*CLI, "up", "--data-dir", str(data_dir), "--port", str(port), "--replicas", "1"],
        stdout=subprocess.PIPE,
        stderr=(data_dir.parent / "up.log").open("w"),
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    key = ""
    for line in proc.stdout:
        if m := re.match(r"export KEEPMEM_API_KEY=(\S+)$", line.strip()):
            key = m.group(1)
        if line.startswith("# for the keep CLI"):
            return proc, f"http://127.0.0.1:{port}", key
    raise SystemExit("keepmem up did not start; see up.log")


def api_writes(url: str, key: str, prefix: str, writes: int, clients: int) -> list[float]:
    """Milliseconds per acknowledged POST /v1/notes, ``clients`` at once."""
    times: list[float] = []
    lock = threading.Lock()

    def run(n: int) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            for i in range(writes // clients):
                began = time.perf_counter()
                r = client.post(
                    "/v1/notes", json={"id": f"{prefix}-{n}-{i}", "content": f"Write {i}."}
                )
                spent = (time.perf_counter() - began) * 1000
                r.raise_for_status()
                with lock:
                    times.append(spent)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def commits(primary: replication.Standby, writes: int) -> list[float]:
    """Milliseconds per one-row INSERT committed on the primary."""
    import asyncpg

    async def run() -> list[float]:
        conn = await asyncpg.connect(
            host=primary.socket_dir, port=primary.port, user="postgres", database="keepmem"
        )
        try:
            await conn.execute("CREATE TABLE IF NOT EXISTS bench_sync (n int)")
            times = []
            for i in range(writes):
                began = time.perf_counter()
                await conn.execute("INSERT INTO bench_sync VALUES ($1)", i)
                times.append((time.perf_counter() - began) * 1000)
            return times
        finally:
            await conn.close()

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--writes", type=int, default=100, help="per round and mode")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        data_dir = Path(tmp) / "d"
        proc, url, key = start(data_dir)
        # (any running server of the stack is reached through its postmaster.pid)
        primary = replication.Standby(data_dir, name="primary")
        results: dict[str, dict[str, list[float]]] = {
            mode: {"api": [], "commit": []} for mode in ("off", "on")
        }
        try:
            api_writes(url, key, "warm", 40, args.clients)
            for r in range(args.rounds):
                order = ("off", "on") if r % 2 == 0 else ("on", "off")
                for mode in order:
                    replication.configure_primary(primary, synchronous=mode == "on")
                    time.sleep(0.5)
                    shown = primary.psql("SHOW synchronous_standby_names").strip()
                    assert (shown != "") == (mode == "on"), shown
                    results[mode]["api"] += api_writes(
                        url, key, f"r{r}{mode}", args.writes, args.clients
                    )
                    results[mode]["commit"] += commits(primary, args.writes)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
    summary: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    for what in ("api", "commit"):
        row = {}
        for mode in ("off", "on"):
            times = results[mode][what]
            row[mode] = {"n": len(times), "p50": pct(times, 50), "p95": pct(times, 95)}
        row["ratio_p50"] = row["on"]["p50"] / row["off"]["p50"]
        row["ratio_p95"] = row["on"]["p95"] / row["off"]["p95"]
        summary[what] = row
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
