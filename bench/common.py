"""Shared benchmark plumbing: an embedded stack in a temp dir, API and worker
processes, the LoCoMo corpus."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from app import tenancy
from app.accounts import service as tenants
from app.cli import migrate
from app.cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from app.db import Database
from bench.locomo_data import LOCOMO

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret"


def locomo_turns(path: Path = LOCOMO) -> list[dict[str, Any]]:
    """Every dialogue turn with its session date: {id, text, speaker, date, conv}."""
    data = json.loads(path.read_text())
    turns = []
    for conv in data:
        c = conv["conversation"]
        for key, value in c.items():
            if (
                not key.startswith("session_")
                or key.endswith("date_time")
                or not isinstance(value, list)
            ):
                continue
            date = c.get(f"{key}_date_time", "")
            for turn in value:
                turns.append(
                    {
                        "id": turn["dia_id"],
                        "text": turn["text"],
                        "speaker": turn["speaker"],
                        "date": date,
                        "conv": conv.get("sample_id", ""),
                    }
                )
    return turns


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()}"
    )


class Stack:
    """Embedded Postgres + Redis + API process (+ worker processes) in a temp dir."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.dir = data_dir or Path(tempfile.mkdtemp(prefix="keepmem-bench-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pg = EmbeddedPostgres(self.dir)
        self.redis = EmbeddedRedis(self.dir)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = free_port()
        self.extra_env: dict[str, str] = {}  # more settings for the processes

    def start(self) -> None:
        self.pg.start()
        self.pg.ensure_login_role("keepmem_app")
        migrate.upgrade(self.pg.url("postgres"), "keepmem_app")
        self.redis.start()

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
        env.update(
            {
                "KEEPMEM_DATABASE_URL": self.pg.url("keepmem_app"),
                "KEEPMEM_REDIS_URL": self.redis.url,
                "KEEPMEM_SECRET_KEY": SECRET,
                "KEEPMEM_DISPATCH_POLL_SECONDS": "0.05",
                "KEEPMEM_RATE_LIMIT_PER_MINUTE": "0",
                **self.extra_env,
            }
        )
        return env

    def start_api(self) -> str:
        cmd = [
            sys.executable,
            "-c",
            "from app.cli import main; main()",
            "serve",
            "--port",
            str(self.port),
        ]
        self.procs.append(subprocess.Popen(cmd, env=self.env))
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/v1/ready", timeout=1).status_code == 200:
                    return url
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("API did not start")

    def start_worker(self, **extra: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "worker"], env={**self.env, **extra})
        self.procs.append(proc)
        return proc

    def tenant_key(self, name: str = "bench") -> tuple[str, str]:
        async def make() -> tuple[str, str]:
            db = Database(self.pg.url("keepmem_app"))
            try:
                async with tenancy.system_transaction(db) as s:
                    new = await tenants.create_tenant(s, name=name, server_secret=SECRET)
                    return str(new.tenant.id), new.key.secret
            finally:
                await db.dispose()

        return asyncio.run(make())

    def sql(self, query: str) -> str:
        return self.pg.psql(query, database="keepmem").strip()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.redis.stop()
        self.pg.stop()


@contextmanager
def running_stack(data_dir: Path | None = None) -> Any:
    """A started stack; with ``data_dir``, one that a later run reuses."""
    # A benchmark stopped with SIGTERM still stops its servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack = Stack(data_dir)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def summary(values: list[float]) -> str:
    return (
        f"p50 {pct(values, 50):.1f} ms, p95 {pct(values, 95):.1f} ms, "
        f"mean {statistics.fmean(values):.1f} ms (n={len(values)})"
    )
