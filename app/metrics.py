"""Prometheus metrics of this process, in a registry of keepmem's own.

The API serves them at ``GET /metrics`` (with the queue's figures read from
the database at scrape time, at most every few seconds); a worker serves its
own on ``KEEPMEM_WORKER_METRICS_PORT``. No metric carries a tenant label:
thousands of tenants would make thousands of series each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # memory, CPU, open files of this process

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_JOB = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)

REQUESTS = Histogram(
    "keepmem_http_request_duration_seconds",
    "API requests by route template, method and status (time to the end of the response).",
    ["method", "route", "status"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
JOBS = Histogram(
    "keepmem_job_duration_seconds",
    "Background jobs run by this worker, by kind and outcome (done, retry, dead, ...).",
    ["kind", "outcome"],
    buckets=_JOB,
    registry=REGISTRY,
)
JOB_FAILURES = Counter(
    "keepmem_job_failures_total",
    "Job runs that failed, by kind and what follows (retry or dead).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
EMBEDDED = Counter(
    "keepmem_embedded_notes_total",
    "Notes and parts this worker embedded (rate: embedding throughput).",
    registry=REGISTRY,
)
MEMORY_EXTRACTIONS = Counter(
    "keepmem_memory_extractions_total",
    "Memory extraction runs by mode (rules, a model's name, or refused: past the budget, "
    "read by the rules) and their outcomes by op (add, supersede, update, noop).",
    ["mode", "op"],
    registry=REGISTRY,
)
MEMORY_TOKENS = Counter(
    "keepmem_memory_tokens_total",
    "Model tokens spent on memory extraction, by direction (in, out).",
    ["direction"],
    registry=REGISTRY,
)
QUEUED = Gauge(
    "keepmem_jobs",
    "Jobs in the outbox by kind and status (pending, dispatched, running, dead).",
    ["kind", "status"],
    registry=REGISTRY,
)
OLDEST = Gauge(
    "keepmem_jobs_oldest_pending_age_seconds",
    "Age of the oldest job waiting to run (pending or dispatched), by kind.",
    ["kind"],
    registry=REGISTRY,
)
POOL = Gauge(
    "keepmem_db_pool_connections",
    "Database connections of this process's pool: in use, idle, overflow, and the size.",
    ["state"],
    registry=REGISTRY,
)
STREAMS = Gauge(
    "keepmem_event_streams_open",
    "Open event streams (GET /v1/events and GET /mcp) in this process.",
    registry=REGISTRY,
)

# Figures read from the database are kept this long (scrapers may be many).
QUEUE_TTL_S = 5.0
_queue_read_at = 0.0


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    REQUESTS.labels(method, route, str(status)).observe(seconds)


def observe_job(kind: str, outcome: str, seconds: float) -> None:
    JOBS.labels(kind, outcome).observe(seconds)
    if outcome in ("retry", "dead"):
        JOB_FAILURES.labels(kind, outcome).inc()


def observe_extraction(mode: str, ops: dict[str, int], tokens_in: int, tokens_out: int) -> None:
    for op, n in ops.items():
        if n:
            MEMORY_EXTRACTIONS.labels(mode, op).inc(n)
    if tokens_in or tokens_out:
        MEMORY_TOKENS.labels("in").inc(tokens_in)
        MEMORY_TOKENS.labels("out").inc(tokens_out)


def watch_pool(pool_status: Callable[[], dict[str, int]]) -> None:
    """Read the pool's figures at each scrape (the newest pool watched wins)."""

    def reader(state: str) -> Callable[[], float]:
        return lambda: float(pool_status().get(state, 0))

    for state in ("in_use", "idle", "overflow", "size"):
        POOL.labels(state).set_function(reader(state))


def queue_is_stale() -> bool:
    return time.monotonic() - _queue_read_at >= QUEUE_TTL_S


def set_queue(rows: Iterable[tuple[str, str, int, float | None]]) -> None:
    """(kind, status, count, age in seconds of the oldest) from the outbox."""
    global _queue_read_at
    QUEUED.clear()
    OLDEST.clear()
    waiting: dict[str, float] = {}
    for kind, status, count, oldest in rows:
        QUEUED.labels(kind, status).set(count)
        if status in ("pending", "dispatched") and oldest is not None:
            waiting[kind] = max(waiting.get(kind, 0.0), oldest)
    for kind, age in waiting.items():
        OLDEST.labels(kind).set(age)
    _queue_read_at = time.monotonic()


_serving: set[tuple[str, int]] = set()


def serve(port: int, host: str) -> None:
    """This process's metrics on their own port (the worker's); once per
    process (a worker restarted in-process after a Redis outage keeps it)."""
    if (host, port) in _serving:
        return
    start_http_server(port, addr=host, registry=REGISTRY)
    _serving.add((host, port))
