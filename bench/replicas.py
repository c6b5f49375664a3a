"""Find throughput with a read replica (issue 38).

    .venv/bin/python -m bench.replicas [--notes 20000] [--queries 200] [--rounds 2]

One embedded primary holding ``--notes`` real paragraphs (Python docstrings,
MiniLM vectors, as bench/search.py loads them) and one streaming standby of
it (app.cli.replication) on the same machine. The API (``keepmem serve``,
its default process count) is started twice per round: on the primary
alone, then with ``KEEPMEM_DATABASE_REPLICA_URLS`` naming the standby; each
time held-out paragraphs are asked as finds at concurrency 8 (query
embeddings warmed first, so the time is the service's own) and finds per
second are counted. The rounds alternate, and the ratio is reported: on one
machine the replica competes with the primary for the same cores, so the
ratio says what routing costs or gains here, not what a second machine adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
from sqlalchemy import text

from app import tenancy
from app.cli import replication
from app.db import Database
from app.search.fulltext import repository as search_repo
from app.tenancy import scope_for_job
from bench.common import machine, pct, running_stack
from bench.search import bulk_load, corpus, embeddings

CONCURRENCY = 8
METRICS_TOKEN = "bench-metrics-token"


def start_api(env: dict[str, str], port: int) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("API did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


async def finds(url: str, key: str, queries: list[str], passes: int) -> tuple[float, list[float]]:
    """(finds per second, latencies in ms) of ``passes`` over ``queries`` at
    concurrency 8."""
    todo: asyncio.Queue[str] = asyncio.Queue()
    for _ in range(passes):
        for q in queries:
            todo.put_nowait(q)
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {key}"}

    async def client(http: httpx.AsyncClient) -> None:
        while not todo.empty():
            q = todo.get_nowait()
            t = time.perf_counter()
            r = await http.post("/v1/search", json={"query": q, "limit": 10}, headers=headers)
            latencies.append((time.perf_counter() - t) * 1000)
            r.raise_for_status()

    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        t = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - t
    return len(latencies) / elapsed, latencies


def served_by(url: str) -> dict[str, float]:
    body = httpx.get(
        url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
    ).text
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("keepmem_reads_total{"):
            label = line.split('served_by="', 1)[1].split('"', 1)[0]
            out[label] = out.get(label, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def load(stack: Any, tenant: uuid.UUID, texts: list[str], vecs: Any) -> float:
    async def run() -> float:
        owner = Database(stack.pg.url("postgres"))
        app = Database(stack.pg.url("keepmem_app"))
        try:
            async with owner.engine.begin() as c:
                project = (
                    await c.execute(
                        text("SELECT id FROM projects WHERE tenant_id = :t"), {"t": tenant}
                    )
                ).scalar_one()
            t = time.perf_counter()
            await bulk_load(owner, tenant, project, texts, vecs)
            async with owner.engine.begin() as c:
                await c.execute(text("UPDATE notes SET fts = to_tsvector('english', summary)"))
                await c.execute(text("ANALYZE"))
            async with tenancy.tenant_id_transaction(app, tenant) as session:
                await search_repo.refresh_term_stats(
                    session, scope_for_job(tenant, project), min_notes=2000
                )
            return time.perf_counter() - t
        finally:
            await app.dispose()
            await owner.dispose()

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passes", type=int, default=3, help="measured passes over the queries")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    texts = corpus()[: args.notes + args.queries]
    vecs = embeddings(texts)
    docs, queries = texts[: args.notes], texts[args.notes :]
    results: dict[str, Any] = {
        "machine": machine(),
        "notes": args.notes,
        "queries": len(queries),
        "concurrency": CONCURRENCY,
        "finds_per_run": len(queries) * args.passes,
    }
    with running_stack() as stack:
        tenant_id, key = stack.tenant_key("bench")
        results["load_s"] = round(load(stack, uuid.UUID(tenant_id), docs, vecs[: args.notes]), 1)
        replication.configure_primary(stack.pg)
        standby = replication.make_standby(stack.pg, stack.dir, name="replica-1")
        replication.wait_for_replay(standby, replication.wal_insert_lsn(stack.pg), timeout=300)
        env = {**stack.env, "KEEPMEM_METRICS_TOKEN": METRICS_TOKEN}
        runs: dict[str, list[dict[str, float]]] = {"primary": [], "replica": []}
        try:
            for _ in range(args.rounds):
                for name in ("primary", "replica"):
                    extra = (
                        {"KEEPMEM_DATABASE_REPLICA_URLS": standby.url("keepmem_app")}
                        if name == "replica"
                        else {}
                    )
                    proc, url = start_api({**env, **extra}, stack.port)
                    try:
                        # every API process embeds and caches the queries itself
                        asyncio.run(finds(url, key, queries, 2))
                        before = served_by(url)
                        rate, ms = asyncio.run(finds(url, key, queries, args.passes))
                        after = served_by(url)
                    finally:
                        stop(proc)
                    by_replica = after.get("replica", 0.0) - before.get("replica", 0.0)
                    runs[name].append(
                        {
                            "finds_per_s": round(rate, 1),
                            "p50_ms": round(pct(ms, 50), 1),
                            "p95_ms": round(pct(ms, 95), 1),
                            "served_by_replica": by_replica,
                        }
                    )
                    print(name, runs[name][-1], flush=True)
        finally:
            standby.stop()
    mean = {n: sum(r["finds_per_s"] for r in rs) / len(rs) for n, rs in runs.items()}
    results["runs"] = runs
    results["finds_per_s_mean"] = {n: round(v, 1) for n, v in mean.items()}
    results["ratio_replica_to_primary"] = round(mean["replica"] / mean["primary"], 3)
    results["api_processes"] = int(os.environ.get("KEEPMEM_API_WORKERS", "0")) or "default"
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
