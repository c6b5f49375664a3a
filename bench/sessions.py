"""Sessions benchmark (issue 32): hook events in, the worker's digest, the
resume block, against the embedded stack (PostgreSQL, Redis, API and worker
processes, as bench/common.py starts them) on 127.0.0.1.

    .venv/bin/python -m bench.sessions [--clients 4] [--interval 4] [--seconds 90]
                                       [--drain-batches 60] [--drain-interval 0.5]
                                       [--resumes 200] [--wait-all] [--out FILE] [--check]

Events: tests/fixtures/sessions/*.jsonl (the four hosts' hook payloads),
turned into the contract's events by the hook client's own adapters
(keepmem_client.hooks.adapters), replayed over and over with the session ids
made unique per replay (``<id>-r<n>``), so sessions multiply; ``at`` is the
time of sending. Each client replays the four hosts in turn (client c
starting at host c), cut into batches of 20 consecutive events. A warm-up
(one replay of each host, the worker's model loaded) is not measured.

1. Steady: --clients clients each POST a 20-event batch to
   /v1/sessions/events every --interval seconds (open loop, staggered) for
   --seconds, the worker running. Intake p50/p95 per batch, server-side
   (``Server-Timing: app``: the whole request in the API process, the commit
   included); the client's round trip beside it.
2. Worker, steady: from the first POST until no session_digest job is open
   (pending, dispatched or running, polled on GET /v1/jobs), and apart until
   no embed job is open (with --wait-all, no job at all: graph extraction of
   the event notes is the rest): events / seconds. With a steady rate this is
   at most the offered rate; the lag after the last POST says whether the
   worker kept up.
3. Resume: GET /v1/sessions/resume?cwd=/home/dev/shop&session_id=... for
   --resumes of the steady phase's sessions once they are digested, server-side
   p50/p95, with the worker running (background jobs may still run), then
   with the worker stopped (SIGSTOP).
4. Drain (the worker's capacity): the worker still stopped, --drain-batches
   more batches (--drain-interval apart per client: intake with the API
   alone), then the worker resumed: events / seconds until digested, embedded
   (and with --wait-all, every job done).

Targets (issue 32): intake p95 <= 15 ms server-side for a 20-event batch
(phase 1), resume p95 <= 30 ms (phase 3, worker running). ``--check`` exits 1
when one is missed, a request failed or a job died. The table goes to
stdout, the full result as JSON to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from keepmem_client.hooks.adapters import adapt, now_iso

from bench.common import ROOT, machine, pct, running_stack

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
PLATFORMS = ("claude-code", "codex", "gemini", "kimi")
BATCH = 20
CWD = "/home/dev/shop"
TARGETS = {"intake_p95_ms": 15.0, "resume_p95_ms": 30.0}
OPEN = ("pending", "dispatched", "running")
POLL_S = 0.25


def fixture_streams() -> dict[str, list[dict[str, Any]]]:
    """Each host's fixture as the hook client would send it (what its
    adapters turn into no event is left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in PLATFORMS:
        events = []
        for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                event = adapt(name, row["event"], row["payload"])
                if event is not None:
                    events.append(event)
        out[name] = events
    return out


def client_batches(
    streams: dict[str, list[dict[str, Any]]], client: int, replays: Iterator[int]
) -> Iterator[list[dict[str, Any]]]:
    """Client ``client``'s batches: the hosts' streams in turn, each replay
    with session ids of its own, cut into batches of 20."""

    def events() -> Iterator[dict[str, Any]]:
        for i in itertools.count(client):
            name = PLATFORMS[i % len(PLATFORMS)]
            n = next(replays)
            for ev in streams[name]:
                yield {**ev, "session_id": f"{ev['session_id']}-r{n}"}

    it = events()
    while True:
        yield [next(it) for _ in range(BATCH)]


def timing(response: httpx.Response) -> dict[str, float]:
    """The Server-Timing entries (ms): ``app`` is the whole request."""
    found = re.findall(r"(\w+);dur=([\d.]+)", response.headers.get("server-timing", ""))
    return {name: float(ms) for name, ms in found}


class Sender:
    """POSTs batches on a fixed schedule and keeps what each one took."""

    def __init__(self, http: httpx.AsyncClient, headers: dict[str, str]) -> None:
        self.http, self.headers = http, headers
        self.rows: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.sessions: set[str] = set()
        self.sent = 0  # events in every batch sent
        self.events = 0  # events in the batches answered 202
        self.accepted = 0
        self.first_post: float | None = None

    async def post(self, batch: list[dict[str, Any]]) -> None:
        stamp = now_iso()
        body = {"events": [{**ev, "at": stamp} for ev in batch]}
        self.sessions.update(ev["session_id"] for ev in batch)
        self.sent += len(batch)
        if self.first_post is None:
            self.first_post = time.monotonic()
        began = time.perf_counter()
        try:
            r = await self.http.post("/v1/sessions/events", json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        client_ms = (time.perf_counter() - began) * 1000
        if r.status_code != 202:
            self.errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
            return
        self.events += len(batch)
        self.accepted += int(r.json()["accepted"])
        self.rows.append(
            {
                "server_ms": timing(r).get("app", float("nan")),
                "client_ms": client_ms,
                "platforms": sorted({ev["platform"] for ev in batch}),
                "bytes": len(r.request.content),
            }
        )

    async def paced(
        self,
        streams: dict[str, list[dict[str, Any]]],
        replays: Iterator[int],
        *,
        clients: int,
        interval: float,
        per_client: int,
    ) -> float:
        """Every client sends ``per_client`` batches, one each ``interval``
        seconds, clients staggered; returns the monotonic time of the last answer."""
        gens = [client_batches(streams, c, replays) for c in range(clients)]
        start = time.monotonic() + 0.1
        plan = sorted(
            (start + c * interval / clients + i * interval, c)
            for c in range(clients)
            for i in range(per_client)
        )
        tasks = []
        for at, c in plan:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            tasks.append(asyncio.create_task(self.post(next(gens[c]))))
        await asyncio.gather(*tasks)
        return time.monotonic()


async def any_open(http: httpx.AsyncClient, headers: dict[str, str], kind: str | None) -> bool:
    for status in OPEN:
        params = {"status": status, "limit": 1, **({"kind": kind} if kind else {})}
        r = await http.get("/v1/jobs", params=params, headers=headers)
        r.raise_for_status()
        if r.json()["jobs"]:
            return True
    return False


async def wait_idle(
    http: httpx.AsyncClient, headers: dict[str, str], limit_s: float, *, wait_all: bool
) -> dict[str, float | None]:
    """Poll the job list until no session_digest and no embed job is open
    (with ``wait_all``, no job at all: graph extraction is the rest); for
    each, the monotonic time of the first poll that found none open after
    the last that found one (None: still open at the timeout)."""
    done: dict[str, float | None] = {"session_digest": None, "embed": None}
    if wait_all:
        done["all"] = None
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now = time.monotonic()
        for name in done:
            if await any_open(http, headers, None if name == "all" else name):
                done[name] = None
            elif done[name] is None:
                done[name] = now
        if all(at is not None for at in done.values()):
            break
        await asyncio.sleep(POLL_S)
    return done


def worker_figures(
    events: int, t0: float, t_last_post: float, done: dict[str, float | None]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "events": events,
        "posting_s": round(t_last_post - t0, 2),
    }
    for name, label in (("session_digest", "digest"), ("embed", "embed"), ("all", "all_jobs")):
        if name not in done:
            continue  # not waited for
        at = done[name]
        if at is None:
            out[label] = None
            continue
        out[label] = {
            "seconds": round(at - t0, 2),
            "events_per_s": round(events / (at - t0), 1),
            "lag_after_last_post_s": round(max(0.0, at - t_last_post), 2),
        }
    return out


def job_counts(stack: Any, since: float) -> dict[str, dict[str, int]]:
    rows = stack.sql(
        "SELECT kind, status, count(*) FROM jobs "
        f"WHERE created_at >= to_timestamp({since}) GROUP BY kind, status ORDER BY 1, 2"
    )
    out: dict[str, dict[str, int]] = {}
    for row in rows.splitlines():
        kind, status, n = row.split("|")
        out.setdefault(kind, {})[status] = int(n)
    return out


def digest_check(stack: Any) -> dict[str, int]:
    """Whether every session's events were digested (read in the database)."""
    row = stack.sql(
        "SELECT (SELECT count(*) FROM session_inbox), count(*), "
        "coalesce(sum(next_seq), 0), coalesce(sum(digested_seq), 0), "
        "count(*) FILTER (WHERE digested_seq < next_seq) FROM agent_sessions"
    )
    inbox, sessions, stored, digested, behind = (int(x) for x in row.split("|"))
    return {
        "inbox_left": inbox,
        "sessions": sessions,
        "events_stored": stored,
        "events_digested": digested,
        "sessions_behind": behind,
    }


def latency(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(pct(values, 50), 2),
        "p95": round(pct(values, 95), 2),
        "max": round(max(values), 2) if values else float("nan"),
        "n": len(values),
    }


def intake_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    server = [r["server_ms"] for r in rows]
    return {
        "server_ms": latency(server),
        "client_ms": latency([r["client_ms"] for r in rows]),
        "batch_kb_p50": round(pct([r["bytes"] / 1024 for r in rows], 50), 1),
        # Claude Code's fixture holds a 120k-char Bash output (cut to 64k by
        # the hook client): the batches that carry it are the heavy ones.
        "server_ms_by_host": {
            name: latency([r["server_ms"] for r in rows if name in r["platforms"]])
            for name in PLATFORMS
        },
    }


async def resumes(
    http: httpx.AsyncClient, headers: dict[str, str], sessions: list[str]
) -> dict[str, Any]:
    server: list[float] = []
    client: list[float] = []
    chars: list[int] = []
    for sid in sessions:
        began = time.perf_counter()
        r = await http.get(
            "/v1/sessions/resume", params={"cwd": CWD, "session_id": sid}, headers=headers
        )
        client.append((time.perf_counter() - began) * 1000)
        r.raise_for_status()
        server.append(timing(r)["app"])
        chars.append(int(r.json()["chars"]))
    return {
        "server_ms": latency(server),
        "client_ms": latency(client),
        "context_chars_p50": pct([float(c) for c in chars], 50),
        "empty": sum(1 for c in chars if c == 0),
    }


async def open_jobs(http: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, int]:
    """Open jobs by kind (up to 500 a status), e.g. graph extraction still queued."""
    out: dict[str, int] = {}
    for status in OPEN:
        r = await http.get("/v1/jobs", params={"status": status, "limit": 500}, headers=headers)
        r.raise_for_status()
        for job in r.json()["jobs"]:
            out[job["kind"]] = out.get(job["kind"], 0) + 1
    return out


async def run(args: argparse.Namespace, stack: Any, url: str, key: str, worker: Any) -> dict:
    streams = fixture_streams()
    replays = itertools.count()
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=4 * args.clients + 4)
    result: dict[str, Any] = {
        "machine": machine(),
        "nproc": os.cpu_count(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "fixture_events_per_replay": {k: len(v) for k, v in streams.items()},
        "settings": {
            "clients": args.clients,
            "interval_s": args.interval,
            "seconds": args.seconds,
            "batch": BATCH,
            "offered_events_per_s": round(args.clients * BATCH / args.interval, 1),
            "drain_batches": args.drain_batches,
            "drain_interval_s": args.drain_interval,
            "resumes": args.resumes,
            "wait_all": args.wait_all,
        },
        "targets": TARGETS,
        "timing_source": "Server-Timing app (server-side), client round trip beside it",
    }
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        # Warm up (not measured): the worker loads its model, the API its
        # caches; one replay of each host, then wait for the worker.
        warm = Sender(http, headers)
        await warm.paced(streams, replays, clients=len(PLATFORMS), interval=0.5, per_client=3)
        if warm.errors:
            raise RuntimeError(f"warm-up failed: {warm.errors[:3]}")
        await wait_idle(http, headers, limit_s=300, wait_all=False)

        # 1-2. Steady replay, the worker running.
        steady = Sender(http, headers)
        t_wall = time.time()
        per_client = max(1, round(args.seconds / args.interval))
        t_last = await steady.paced(
            streams, replays, clients=args.clients, interval=args.interval, per_client=per_client
        )
        assert steady.first_post is not None
        done = await wait_idle(http, headers, limit_s=args.timeout, wait_all=args.wait_all)
        result["steady"] = {
            "batches": len(steady.rows),
            "events_sent": steady.sent,
            "events": steady.events,
            "accepted": steady.accepted,
            "sessions": len(steady.sessions),
            "errors": len(steady.errors),
            "error_examples": steady.errors[:5],
            "intake": intake_figures(steady.rows),
            "worker": worker_figures(steady.events, steady.first_post, t_last, done),
            "jobs": job_counts(stack, t_wall),
            "digested": digest_check(stack),
        }

        # 3. Resume context once the digest is done: with the worker running
        # (graph extraction may still be going on), then with it stopped.
        picked = random.Random(32).sample(
            sorted(steady.sessions), min(args.resumes, len(steady.sessions))
        )
        await resumes(http, headers, picked[:10])  # warm the route
        result["resume"] = {"open_jobs_before": await open_jobs(http, headers)}
        result["resume"] |= await resumes(http, headers, picked)
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            result["resume_worker_stopped"] = await resumes(http, headers, picked)

            # 4. Drain: a backlog posted with the worker stopped (intake with
            # the API alone), then the worker resumed.
            if args.drain_batches:
                drain = Sender(http, headers)
                t_wall = time.time()
                await drain.paced(
                    streams,
                    replays,
                    clients=args.clients,
                    interval=args.drain_interval,
                    per_client=max(1, args.drain_batches // args.clients),
                )
        finally:
            t_resume = time.monotonic()
            os.kill(worker.pid, signal.SIGCONT)
        if args.drain_batches:
            done = await wait_idle(http, headers, limit_s=args.timeout, wait_all=args.wait_all)
            figures = worker_figures(drain.events, t_resume, t_resume, done)
            figures.pop("posting_s")
            result["drain"] = {
                "batches": len(drain.rows),
                "events_sent": drain.sent,
                "events": drain.events,
                "accepted": drain.accepted,
                "sessions": len(drain.sessions),
                "errors": len(drain.errors),
                "error_examples": drain.errors[:5],
                "intake_worker_stopped": intake_figures(drain.rows),
                "worker": figures,
                "jobs": job_counts(stack, t_wall),
                "digested": digest_check(stack),
            }
        result["open_jobs_at_end"] = await open_jobs(http, headers)
        dead = await http.get("/v1/jobs", params={"status": "dead", "limit": 500}, headers=headers)
        result["dead_jobs"] = len(dead.json()["jobs"])
    return result


def _row(name: str, v: dict[str, Any], target: str = "") -> str:
    return f"| {name} | {v['p50']:.1f} ms | {v['p95']:.1f} ms | {v['n']} | {target} |"


def table(result: dict[str, Any]) -> str:
    s = result["steady"]
    i = s["intake"]
    lines = [
        "| figure | p50 | p95 | n | target |",
        "|---|---|---|---|---|",
        _row("intake, 20-event batch, server-side, worker running", i["server_ms"], "p95 <= 15 ms"),
        _row("intake, same batches, client round trip", i["client_ms"]),
    ]
    lines += [
        _row(f"intake, server-side, batches holding {name} events", v)
        for name, v in i["server_ms_by_host"].items()
    ]
    if "drain" in result:
        d = result["drain"]["intake_worker_stopped"]
        lines.append(_row("intake, server-side, worker stopped (drain backlog)", d["server_ms"]))
    r = result["resume"]
    lines.append(_row("resume, server-side, worker running", r["server_ms"], "p95 <= 30 ms"))
    lines.append(_row("resume, client round trip, worker running", r["client_ms"]))
    lines.append(
        _row("resume, server-side, worker stopped", result["resume_worker_stopped"]["server_ms"])
    )
    lines += [
        "",
        "| worker | events | digested | embedded | all jobs done |",
        "|---|---|---|---|---|",
    ]

    def cell(w: dict[str, Any], label: str) -> str:
        if label not in w:
            return "not waited for"
        v = w[label]
        if v is None:
            return "not done in time"
        lag = v["lag_after_last_post_s"]
        return f"{v['events_per_s']:.1f} ev/s ({v['seconds']:.1f} s, +{lag:.1f} s)"

    w = s["worker"]
    lines.append(
        f"| steady (from the first POST; +lag after the last) | {w['events']} "
        f"| {cell(w, 'digest')} | {cell(w, 'embed')} | {cell(w, 'all_jobs')} |"
    )
    if "drain" in result:
        w = result["drain"]["worker"]
        lines.append(
            f"| drain (from the worker's resume) | {w['events']} "
            f"| {cell(w, 'digest')} | {cell(w, 'embed')} | {cell(w, 'all_jobs')} |"
        )
    return "\n".join(lines)


def missed(result: dict[str, Any]) -> list[str]:
    out = []
    intake = result["steady"]["intake"]["server_ms"]["p95"]
    if not intake <= TARGETS["intake_p95_ms"]:
        out.append(f"intake p95 {intake:.1f} ms > {TARGETS['intake_p95_ms']:.0f} ms")
    resume = result["resume"]["server_ms"]["p95"]
    if not resume <= TARGETS["resume_p95_ms"]:
        out.append(f"resume p95 {resume:.1f} ms > {TARGETS['resume_p95_ms']:.0f} ms")
    errors = result["steady"]["errors"] + result.get("drain", {}).get("errors", 0)
    if errors:
        out.append(f"{errors} intake request(s) failed")
    if result["dead_jobs"]:
        out.append(f"{result['dead_jobs']} dead job(s)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--interval", type=float, default=4.0, help="seconds between a client's batches"
    )
    parser.add_argument("--seconds", type=float, default=90.0, help="steady phase length")
    parser.add_argument(
        "--drain-batches", type=int, default=60, help="batches posted with the worker stopped"
    )
    parser.add_argument(
        "--drain-interval",
        type=float,
        default=0.5,
        help="seconds between a client's batches while the worker is stopped",
    )
    parser.add_argument(
        "--wait-all",
        action="store_true",
        help="wait for every job (graph extraction too), not only digest and embed",
    )
    parser.add_argument("--resumes", type=int, default=200)
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the worker"
    )
    parser.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for the API and worker processes"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "keepmem-bench-sessions.json",
        help="the JSON result",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    began = time.monotonic()
    with running_stack() as stack:
        stack.extra_env = {
            "KEEPMEM_LOG_LEVEL": "WARNING",
            **dict(item.split("=", 1) for item in args.env),
        }
        url = stack.start_api()
        worker = stack.start_worker()
        _, key = stack.tenant_key("sessions")
        result = asyncio.run(run(args, stack, url, key, worker))
    result["env"] = args.env
    result["wall_s"] = round(time.monotonic() - began, 1)
    result["missed"] = missed(result)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n## Sessions ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(
        f"`python -m bench.sessions --clients {args.clients} --interval {args.interval} "
        f"--seconds {args.seconds} --drain-batches {args.drain_batches} --drain-interval "
        f"{args.drain_interval}{' --wait-all' if args.wait_all else ''}` on {machine()}, "
        f"{platform.machine()}; wall {result['wall_s']} s; JSON: {args.out}\n"
    )
    print(table(result))
    print()
    print(
        "targets:", "all met" if not result["missed"] else "MISSED: " + "; ".join(result["missed"])
    )
    if args.check and result["missed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
