"""Soak: mixed traffic at a fixed rate against the embedded stack (API and
worker processes), for minutes, on 127.0.0.1 only.

    .venv/bin/python -m bench.soak [--minutes 10] [--rate 20] [--warmup 60] [--fixed N]
                                   [--out soak.json]

Open loop: an operation starts every 1/rate seconds whatever the earlier
ones are doing (at most --inflight at once; a start that finds them all
busy is counted as late), in the mix put 25 % (new notes, some new
versions), find 25 %, get 30 %, tag 20 %, with LoCoMo turns as text. One
GET /v1/events stream stays open throughout and counts what it receives.

Reported: errors (any non-2xx or failed request; target 0), p50/p95 per
operation per minute, the notes at the start and the end (find's cost
grows with the project), memory of each process every 30 s after a warm-up
(API and worker RSS; PostgreSQL's processes as private memory and, apart,
the shared buffers they have touched, which grow with the data; Redis RSS)
with the slope over the second half, the job queue at the end
(GET /metrics), and what the event stream saw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import locomo_turns, machine, pct, running_stack

MIX = (("put", 25), ("find", 25), ("get", 30), ("tag", 20))
MEMORY_EVERY_S = 30.0
METRICS_TOKEN = "soak-metrics-token"


def _kb(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def memory_mb(api: int, worker: int, postmaster: int, redis: int) -> dict[str, float]:
    pg = [postmaster, *_children(postmaster)]
    return {
        "api_rss": _kb(Path(f"/proc/{api}/status"), "VmRSS") / 1024,
        "worker_rss": sum(
            _kb(Path(f"/proc/{p}/status"), "VmRSS") for p in [worker, *_children(worker)]
        )
        / 1024,
        # Private memory of the server's processes (their heaps and caches),
        # and the shared buffers they have touched (grows with the data).
        "postgres_private": sum(_kb(Path(f"/proc/{p}/smaps_rollup"), "Pss_Anon") for p in pg)
        / 1024,
        "postgres_shared": sum(_kb(Path(f"/proc/{p}/smaps_rollup"), "Pss_Shmem") for p in pg)
        / 1024,
        "redis_rss": _kb(Path(f"/proc/{redis}/status"), "VmRSS") / 1024,
    }


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (per minute) of (seconds, value) points."""
    if len(points) < 2:
        return 0.0
    xs = [x / 60 for x, _ in points]
    ys = [y for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


class Soak:
    def __init__(self, base: str, key: str, turns: list[dict[str, Any]], seed: int) -> None:
        self.base, self.headers = base, {"Authorization": f"Bearer {key}"}
        self.turns, self.rng = turns, random.Random(seed)
        self.ids: list[str] = []
        self.samples: dict[tuple[int, str], list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.late = 0
        self.started = 0.0
        self.seen: dict[str, int] = defaultdict(int)
        self.fixed = False  # puts only write new versions of existing notes

    def _minute(self) -> int:
        return int((time.monotonic() - self.started) // 60)

    async def op(self, http: httpx.AsyncClient, kind: str) -> None:
        turn = self.rng.choice(self.turns)
        began = time.perf_counter()
        try:
            if kind == "put" or not self.ids:
                kind = "put"
                update = self.ids and (self.fixed or self.rng.random() < 0.2)
                note_id = (
                    self.rng.choice(self.ids) if update else f"soak-{len(self.ids)}-{turn['id']}"
                )
                r = await http.post("/v1/notes", headers=self.headers, json={
                    "id": note_id, "content": turn["text"],
                    "tags": {"speaker": turn["speaker"], "conv": turn["conv"]}})  # fmt: skip
                if r.status_code == 200 and not update:
                    self.ids.append(note_id)
            elif kind == "find":
                r = await http.post("/v1/search", headers=self.headers,
                                    json={"query": turn["text"], "limit": 10})  # fmt: skip
            elif kind == "get":
                r = await http.get(f"/v1/notes/{self.rng.choice(self.ids)}", headers=self.headers)
            else:
                r = await http.patch(
                    f"/v1/notes/{self.rng.choice(self.ids)}/tags",
                    headers=self.headers,
                    json={"set": {"mark": str(self.rng.randrange(5))}},
                )
            if r.status_code >= 300:
                self.errors.append(f"{kind}: HTTP {r.status_code} {r.text[:200]}")
                return
        except httpx.HTTPError as exc:
            self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            return
        self.counts[kind] += 1
        self.samples[(self._minute(), kind)].append((time.perf_counter() - began) * 1000)

    async def note_count(self, http: httpx.AsyncClient) -> int:
        r = await http.get("/v1/health", headers=self.headers)
        return int(r.json()["item_count"])

    async def watch(self) -> None:
        """One event stream for the whole run, counting events by kind."""
        async with (
            httpx.AsyncClient(base_url=self.base, timeout=None) as http,
            http.stream("GET", "/v1/events", headers=self.headers) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    self.seen[line[7:]] += 1


async def run(
    args: argparse.Namespace, base: str, key: str, pids: tuple[int, int, int, int]
) -> dict[str, Any]:
    turns = locomo_turns()
    soak = Soak(base, key, turns, seed=7)
    api_pid, worker_pid, postmaster, redis_pid = pids
    limits = httpx.Limits(max_connections=args.inflight)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as http:
        # A first few notes, then the same traffic unmeasured while the
        # model loads and caches fill (--warmup seconds).
        for _ in range(20):
            await soak.op(http, "put")
        for start in range(0, args.fixed, 100):
            notes = [
                {"id": f"fixed-{i}", "content": soak.rng.choice(turns)["text"]}
                for i in range(start, min(start + 100, args.fixed))
            ]
            r = await http.post("/v1/notes/batch", headers=soak.headers, json={"notes": notes})
            r.raise_for_status()
            soak.ids += [n["id"] for n in notes]
        soak.fixed = args.fixed > 0
        busy: set[asyncio.Task[None]] = set()
        kinds = [k for k, w in MIX for _ in range(w)]

        async def traffic(seconds: float, sample: Callable[[float], None]) -> None:
            began = time.monotonic()
            for i in range(int(seconds * args.rate)):
                await asyncio.sleep(max(0.0, began + i / args.rate - time.monotonic()))
                if len(busy) >= args.inflight:
                    soak.late += 1
                    continue
                task = asyncio.create_task(soak.op(http, soak.rng.choice(kinds)))
                busy.add(task)
                task.add_done_callback(busy.discard)
                sample(time.monotonic() - began)
            await asyncio.gather(*busy)

        await traffic(args.warmup, lambda _: None)
        soak.errors.clear()
        soak.samples.clear()
        soak.late = 0
        notes_at_start = await soak.note_count(http)
        watcher = asyncio.create_task(soak.watch())
        await asyncio.sleep(1)
        puts_before = soak.counts["put"]
        soak.counts.clear()
        memory: list[tuple[float, dict[str, float]]] = []
        soak.started = time.monotonic()
        memory.append((0.0, memory_mb(api_pid, worker_pid, postmaster, redis_pid)))
        next_memory = [MEMORY_EVERY_S]

        def sample(elapsed: float) -> None:
            if elapsed >= next_memory[0]:
                next_memory[0] += MEMORY_EVERY_S
                memory.append((elapsed, memory_mb(api_pid, worker_pid, postmaster, redis_pid)))

        await traffic(args.minutes * 60, sample)
        elapsed = time.monotonic() - soak.started
        memory.append((elapsed, memory_mb(api_pid, worker_pid, postmaster, redis_pid)))
        await asyncio.sleep(3)  # the stream's poll interval, and a margin
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await watcher
        notes_at_end = await soak.note_count(http)
        r = await http.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        queue = [
            line for line in r.text.splitlines()
            if line.startswith("keepmem_jobs{") and not line.endswith(" 0.0")
        ]  # fmt: skip
    minutes = sorted({m for m, _ in soak.samples})
    table = {
        kind: [
            {
                "minute": m + 1,
                "n": len(soak.samples[(m, kind)]),
                "p50": round(pct(soak.samples[(m, kind)], 50), 1),
                "p95": round(pct(soak.samples[(m, kind)], 95), 1),
            }
            for m in minutes
            if soak.samples[(m, kind)]
        ]
        for kind, _ in MIX
    }
    half = [p for p in memory if p[0] >= elapsed / 2]
    trend = {
        name: {
            "start": round(memory[0][1][name], 1),
            "end": round(memory[-1][1][name], 1),
            "slope_second_half_mb_per_min": round(
                slope_per_min([(t, m[name]) for t, m in half]), 2
            ),
        }
        for name in memory[0][1]
    }
    return {
        "machine": machine(),
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "fixed_notes": args.fixed,
        "env": args.env,
        "operations": dict(soak.counts),
        "warmup_puts": puts_before,
        "notes_at_start_and_end": [notes_at_start, notes_at_end],
        "errors": len(soak.errors),
        "error_examples": soak.errors[:5],
        "late_starts": soak.late,
        "latency_ms": table,
        "memory_mb": trend,
        "memory_samples": [(round(t), {k: round(v, 1) for k, v in m.items()}) for t, m in memory],
        "events_seen": dict(soak.seen),
        "queue_at_end": queue,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="operations per second")
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds, not measured")
    parser.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for the API and worker processes"
    )
    parser.add_argument(
        "--fixed",
        type=int,
        default=0,
        help="load this many notes first; puts then only update them (the data's size holds)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with running_stack() as stack:
        stack.extra_env = {
            "KEEPMEM_METRICS_TOKEN": METRICS_TOKEN,
            "KEEPMEM_LOG_LEVEL": "WARNING",
            **dict(item.split("=", 1) for item in args.env),
        }
        base = stack.start_api()
        worker = stack.start_worker()
        _, key = stack.tenant_key("soak")
        redis = stack.redis.proc.pid if stack.redis.proc is not None else 0
        pids = (stack.procs[0].pid, worker.pid, stack.pg.pid or 0, redis)
        result = asyncio.run(run(args, base, key, pids))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
