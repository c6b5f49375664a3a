"""Message intake and memory extraction throughput (issue 33), against the
embedded stack (PostgreSQL, Redis, the API and one worker process, as
bench/common.py starts them) on 127.0.0.1, offline mode (the rules).

    .venv/bin/python -m bench.memory_speed [--clients 4] [--interval 2] [--seconds 90]
                                           [--drain-threads 100] [--out FILE]

Texts: LoCoMo dialogue turns (shared/data/locomo-dev.json), 20 consecutive
turns a batch, each turn "Speaker: text" with its session date.

1. Steady, the worker running: --clients clients each send one request
   every --interval seconds (open loop, staggered) for --seconds, in turn
   one of three kinds, each into a project of its own and each carrying the
   same 20 turns: POST /v1/threads/{id}/messages with infer true (a thread
   takes three batches in a row), the same with infer false (messages
   only), and POST /v1/notes/batch of the same 20 turns as notes (the
   baseline). Intake p50/p95 per kind, server-side (``Server-Timing: app``,
   the whole request in the API process, commit included), the client's
   round trip beside it, and each kind's p95 over the notes batch's.
2. Drain, three rounds, each with the worker stopped (SIGSTOP) while
   --drain-threads threads of 20 messages are posted, then resumed: with
   infer true (extraction jobs besides the embedding), with infer false
   and as notes batches (embedding only). Per round: seconds from the
   resume until no job of each kind is open, and from the jobs table the
   extraction window (first claim to last finish of the memory_extract
   jobs): jobs/s and messages/s.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from app.db import Database
from bench.common import locomo_turns, machine, pct, running_stack
from bench.locomo_data import _date
from bench.memory import code_state
from bench.sessions import latency, timing

BATCH = 20
KINDS = ("messages, infer true", "messages, infer false", "notes batch (baseline)")
PROJECTS = dict(zip(KINDS, ("msg-infer", "msg-only", "notes"), strict=True))
OPEN = ("pending", "dispatched", "running")


def windows() -> Iterator[list[dict[str, Any]]]:
    """20 consecutive turns of one conversation at a time, round and round."""
    turns = locomo_turns()
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for t in turns:
        by_conv.setdefault(t["conv"], []).append(t)
    chunks = [
        conv[i : i + BATCH]
        for conv in by_conv.values()
        for i in range(0, len(conv) - BATCH + 1, BATCH)
    ]
    return itertools.cycle(chunks)


def request(
    kind: str, n: int, turns: list[dict[str, Any]], thread: str
) -> tuple[str, dict[str, Any]]:
    """The path and body of request ``n`` of ``kind``."""
    if kind == KINDS[2]:
        notes = [
            {
                "id": f"b{n}-{i}",
                "content": f"{t['speaker']}: {t['text']}",
                "tags": {"speaker": t["speaker"], "session": t["id"].split(":")[0]},
                "created_at": _date(t["date"]),
            }
            for i, t in enumerate(turns)
        ]
        return "/v1/notes/batch", {"notes": notes}
    msgs = [
        {
            "role": "user",
            "content": t["text"],
            "name": t["speaker"],
            "time": _date(t["date"]),
            "tags": {"session": t["id"].split(":")[0]},
        }
        for t in turns
    ]
    return f"/v1/threads/{thread}/messages", {"messages": msgs, "infer": kind == KINDS[0]}


class Sender:
    def __init__(self, http: httpx.AsyncClient, key: str) -> None:
        self.http, self.key = http, key
        self.rows: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        self.errors: list[str] = []

    async def post(self, kind: str, path: str, body: dict[str, Any], project: str) -> None:
        headers = {"Authorization": f"Bearer {self.key}", "X-Project": project}
        began = time.perf_counter()
        try:
            r = await self.http.post(path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        client_ms = (time.perf_counter() - began) * 1000
        if r.status_code not in (200, 202):
            self.errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
            return
        if path.endswith("/batch") and r.json().get("failed"):
            self.errors.append(f"notes batch: {r.json()['failed']} failed")
        server = timing(r).get("app", float("nan"))
        self.rows[kind].append({"server_ms": server, "client_ms": client_ms})

    async def steady(
        self, chunks: Iterator[list[dict[str, Any]]], *, clients: int, interval: float, per: int
    ) -> None:
        start = time.monotonic() + 0.1
        plan = sorted(
            (start + c * interval / clients + i * interval, c, i)
            for c in range(clients)
            for i in range(per)
        )
        tasks = []
        for n, (at, c, i) in enumerate(plan):
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            kind = KINDS[(i + c) % len(KINDS)]
            path, body = request(kind, n, next(chunks), f"steady-{c}-{i // 3}")
            tasks.append(asyncio.create_task(self.post(kind, path, body, PROJECTS[kind])))
        await asyncio.gather(*tasks)


async def open_by_kind(db: Database, project: str) -> dict[str, int]:
    async with db.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT j.kind, count(*) FROM jobs j JOIN projects p ON p.tenant_id = j.tenant_id "
                "AND p.id = j.project_id WHERE p.slug = :p AND j.status = ANY(:s) GROUP BY 1"
            ),
            {"p": project, "s": list(OPEN)},
        )
        return {k: int(n) for k, n in rows}


async def extraction_window(db: Database, project: str) -> dict[str, Any]:
    async with db.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT count(*), extract(epoch FROM max(j.finished_at) - min(j.claimed_at)), "
                    "coalesce(sum((j.result->>'messages')::int), 0), "
                    "coalesce(sum((j.result->>'add')::int + (j.result->>'supersede')::int), 0) "
                    "FROM jobs j JOIN projects p ON p.tenant_id = j.tenant_id "
                    "AND p.id = j.project_id "
                    "WHERE p.slug = :p AND j.kind = 'memory_extract' AND j.status = 'done'"
                ),
                {"p": project},
            )
        ).one()
    jobs, seconds, messages, made = int(row[0]), float(row[1] or 0), int(row[2]), int(row[3])
    return {
        "jobs": jobs,
        "window_s": round(seconds, 2),
        "jobs_per_s": round(jobs / seconds, 1) if seconds else None,
        "messages_per_s": round(messages / seconds, 1) if seconds else None,
        "memories_made": made,
    }


async def drain(
    http: httpx.AsyncClient,
    db: Database,
    key: str,
    worker: Any,
    kind: str,
    threads: int,
    chunks: Iterator[list[dict[str, Any]]],
    limit_s: float,
) -> dict[str, Any]:
    """Post ``threads`` batches with the worker stopped, resume it, and time
    each kind of job until none is open."""
    project = "drain-" + PROJECTS[kind]
    sender = Sender(http, key)
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        for n in range(threads):
            path, body = request(kind, 100_000 + n, next(chunks), f"drain-{n}")
            await sender.post(kind, path, body, project)
    finally:
        resumed = time.monotonic()
        os.kill(worker.pid, signal.SIGCONT)
    done: dict[str, float | None] = {}
    seen: set[str] = set()
    while time.monotonic() - resumed < limit_s:
        now = time.monotonic()
        open_now = await open_by_kind(db, project)
        seen |= set(open_now)
        for k in seen:
            if open_now.get(k):
                done[k] = None
            elif done.get(k) is None:
                done[k] = round(now - resumed, 2)
        if seen and all(v is not None for v in done.values()):
            break
        await asyncio.sleep(0.25)
    out: dict[str, Any] = {
        "batches": len(sender.rows[kind]),
        "messages": len(sender.rows[kind]) * BATCH,
        "errors": sender.errors[:3],
        "done_after_resume_s": done,
        "intake_worker_stopped_server_ms": latency([r["server_ms"] for r in sender.rows[kind]]),
    }
    if kind == KINDS[0]:
        out["extraction"] = await extraction_window(db, project)
    return out


async def run(
    args: argparse.Namespace, stack: Any, url: str, key: str, worker: Any
) -> dict[str, Any]:
    chunks = windows()
    result: dict[str, Any] = {
        "machine": machine(),
        "code": code_state(),
        "arch": platform.machine(),
        "settings": {
            "clients": args.clients,
            "interval_s": args.interval,
            "seconds": args.seconds,
            "batch": BATCH,
            "drain_threads": args.drain_threads,
        },
    }
    db = Database(stack.pg.url("postgres"))
    limits = httpx.Limits(max_connections=4 * args.clients + 4)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
            warm = Sender(http, key)
            await warm.steady(chunks, clients=3, interval=0.5, per=3)
            await asyncio.to_thread(stack_idle, stack, 600)
            steady = Sender(http, key)
            per = max(1, round(args.seconds / args.interval))
            await steady.steady(chunks, clients=args.clients, interval=args.interval, per=per)
            base = pct([r["server_ms"] for r in steady.rows[KINDS[2]]], 95)
            result["steady"] = {
                "errors": len(steady.errors) + len(warm.errors),
                "error_examples": (warm.errors + steady.errors)[:5],
                "intake": {
                    k: {
                        "server_ms": latency([r["server_ms"] for r in rows]),
                        "client_ms": latency([r["client_ms"] for r in rows]),
                        "p95_over_notes_batch": round(
                            pct([r["server_ms"] for r in rows], 95) / base, 2
                        ),
                    }
                    for k, rows in steady.rows.items()
                },
            }
            await asyncio.to_thread(stack_idle, stack, 900)
            result["drain"] = {}
            for kind in KINDS:
                result["drain"][kind] = await drain(
                    http, db, key, worker, kind, args.drain_threads, chunks, args.timeout
                )
                await asyncio.to_thread(stack_idle, stack, 900)
        result["dead_jobs"] = int(stack.sql("SELECT count(*) FROM jobs WHERE status = 'dead'"))
    finally:
        await db.dispose()
    return result


def stack_idle(stack: Any, timeout: float) -> None:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if stack.sql("SELECT count(*) FROM jobs WHERE status IN " + str(OPEN)) == "0":
            return
        time.sleep(0.5)
    raise RuntimeError(f"jobs still open after {timeout} s")


def table(result: dict[str, Any]) -> str:
    lines = [
        "| intake, 20 turns a request, worker running | server p50 | server p95 | client p95 "
        "| n | p95 / notes batch p95 |",
        "|---|---|---|---|---|---|",
    ]
    for kind, v in result["steady"]["intake"].items():
        s, c = v["server_ms"], v["client_ms"]
        lines.append(
            f"| {kind} | {s['p50']:.1f} ms | {s['p95']:.1f} ms | {c['p95']:.1f} ms | {s['n']} "
            f"| {v['p95_over_notes_batch']:.2f} |"
        )
    lines += [
        "",
        "| drain (worker resumed) | messages | embed done | memory_extract done | all done "
        "| extraction window: jobs/s, messages/s | intake p95, worker stopped |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, d in result["drain"].items():
        done = d["done_after_resume_s"]
        every = [v for v in done.values() if v is not None]
        ext = d.get("extraction")
        window = (
            f"{ext['jobs_per_s']} jobs/s, {ext['messages_per_s']} msg/s ({ext['jobs']} jobs "
            f"in {ext['window_s']} s)"
            if ext
            else "-"
        )
        lines.append(
            f"| {kind} | {d['messages']} | {done.get('embed')} s "
            f"| {done.get('memory_extract', '-')} s "
            f"| {max(every) if every else None} s | {window} "
            f"| {d['intake_worker_stopped_server_ms']['p95']:.1f} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--drain-threads", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "keepmem-bench-memory-speed.json"
    )
    args = parser.parse_args()
    began = time.monotonic()
    with running_stack() as stack:
        stack.extra_env = {"KEEPMEM_LOG_LEVEL": "WARNING"}
        url = stack.start_api()
        worker = stack.start_worker()
        _, key = stack.tenant_key("memory-speed")
        result = asyncio.run(run(args, stack, url, key, worker))
    result["wall_s"] = round(time.monotonic() - began, 1)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"\n## Memory intake and extraction ({stamp})\n")
    print(
        f"`python -m bench.memory_speed --clients {args.clients} --interval {args.interval} "
        f"--seconds {args.seconds} --drain-threads {args.drain_threads}` on {result['machine']}, "
        f"{result['arch']}; wall {result['wall_s']} s; errors {result['steady']['errors']}; "
        f"dead jobs {result['dead_jobs']}; code {result['code']}; JSON: {args.out}\n"
    )
    print(table(result))


if __name__ == "__main__":
    main()
