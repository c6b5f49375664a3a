"""Prometheus metrics, in a registry of keepmem's own.

The API serves them at ``GET /metrics`` (with the queue's figures read from
the database at scrape time, at most every few seconds); a worker serves its
own on ``KEEPMEM_WORKER_METRICS_PORT``. No metric carries a tenant label:
thousands of tenants would make thousands of series each.

When the API runs as several processes (``KEEPMEM_API_WORKERS``), a scrape
reaches one of them but must report them all: the CLI then gives every API
process ``PROMETHEUS_MULTIPROC_DIR``, prometheus_client's multiprocess mode
(chosen by that variable when the library is imported, before any setting
is read). Each process writes its figures to memory-mapped files there;
``REGISTRY`` then merges the files (counters and histograms summed over the
processes, gauges by their ``multiprocess_mode``) and adds each live
process's memory and CPU with a ``pid`` label.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

# Where prometheus_client keeps this process's figures (None: in memory).
MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None

#: What is served: this process's metrics, or every API process's.
REGISTRY = CollectorRegistry(auto_describe=True)
# The metric objects below register here; in multiprocess mode their own
# values are this process's only, and the merged files are served instead.
_OWN = REGISTRY if MULTIPROC_DIR is None else CollectorRegistry(auto_describe=True)

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_JOB = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)

REQUESTS = Histogram(
    "keepmem_http_request_duration_seconds",
    "API requests by route template, method and status (time to the end of the response).",
    ["method", "route", "status"],
    buckets=_LATENCY,
    registry=_OWN,
)
JOBS = Histogram(
    "keepmem_job_duration_seconds",
    "Background jobs run by this worker, by kind and outcome (done, retry, dead, ...).",
    ["kind", "outcome"],
    buckets=_JOB,
    registry=_OWN,
)
JOB_FAILURES = Counter(
    "keepmem_job_failures_total",
    "Job runs that failed, by kind and what follows (retry or dead).",
    ["kind", "outcome"],
    registry=_OWN,
)
EMBEDDED = Counter(
    "keepmem_embedded_notes_total",
    "Notes and parts this worker embedded (rate: embedding throughput).",
    registry=_OWN,
)
MEMORY_EXTRACTIONS = Counter(
    "keepmem_memory_extractions_total",
    "Memory extraction runs by mode (rules, a model's name, or refused: past the budget, "
    "read by the rules) and their outcomes by op (add, supersede, update, noop).",
    ["mode", "op"],
    registry=_OWN,
)
MEMORY_TOKENS = Counter(
    "keepmem_memory_tokens_total",
    "Model tokens spent on memory extraction, by direction (in, out).",
    ["direction"],
    registry=_OWN,
)
POOL = Gauge(
    "keepmem_db_pool_connections",
    "Database connections of this process's pool (of every API process together when "
    "there are several): in use, idle, overflow, and the size.",
    ["state"],
    multiprocess_mode="livesum",
    registry=_OWN,
)
STREAMS = Gauge(
    "keepmem_event_streams_open",
    "Open event streams (GET /v1/events and GET /mcp) in this process (in every API "
    "process together when there are several).",
    multiprocess_mode="livesum",
    registry=_OWN,
)

# Read replicas (app.replicas). A replica is named by its place in
# KEEPMEM_DATABASE_REPLICA_URLS (replica0, replica1, ...), never by its URL.
REPLICA_LAG = Gauge(
    "keepmem_replica_lag_seconds",
    "How far each read replica's replay is behind the primary, as last checked "
    "(-1: it could not be reached).",
    ["replica"],
    multiprocess_mode="livemax",
    registry=_OWN,
)
REPLICA_IN_ROTATION = Gauge(
    "keepmem_replica_in_rotation",
    "1 while a read replica serves reads, 0 while it is out (unreachable, promoted, or "
    "lagging past KEEPMEM_REPLICA_MAX_LAG_SECONDS).",
    ["replica"],
    multiprocess_mode="livemin",
    registry=_OWN,
)
READS = Counter(
    "keepmem_reads_total",
    "Finds, lists and gets when read replicas are configured, by what served them "
    "(replica or primary).",
    ["served_by"],
    registry=_OWN,
)
CONSISTENT_READS = Counter(
    "keepmem_replica_consistent_reads_total",
    "Reads carrying X-Keepmem-Consistency, by outcome: replica (one had replayed the "
    "write), waited (one had after polling), primary (none within KEEPMEM_REPLICA_WAIT_MS, "
    "or none in rotation).",
    ["outcome"],
    registry=_OWN,
)
REPLICA_RETRIES = Counter(
    "keepmem_replica_retries_total",
    "Reads a replica failed that the primary then answered, by reason (read_only: the "
    "read had to write; unavailable; conflict: cancelled by replay; error), and the "
    "incidental writes of replica reads that failed on the primary (deferred_write).",
    ["reason"],
    registry=_OWN,
)


def observe_replica(name: str, *, lag: float | None, in_rotation: bool) -> None:
    REPLICA_LAG.labels(name).set(-1.0 if lag is None else lag)
    REPLICA_IN_ROTATION.labels(name).set(1.0 if in_rotation else 0.0)


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
        _watch(f"pool {state}", POOL.labels(state), reader(state))


def watch_streams(open_streams: Callable[[], int]) -> None:
    """Count the event streams this process holds open, for scrapes served by
    another API process (one process sets its count at the scrape itself)."""
    if MULTIPROC_DIR is not None:
        _watch("streams", STREAMS, lambda: float(open_streams()))


# In multiprocess mode: gauges whose figures live in one process, and how to
# read them (a scrape reads the files, so each process writes its own).
_live: dict[str, tuple[Gauge, Callable[[], float]]] = {}


def _watch(name: str, gauge: Gauge, read: Callable[[], float]) -> None:
    if MULTIPROC_DIR is None:
        gauge.set_function(read)
    else:
        _live[name] = (gauge, read)
        gauge.set(read())


def write_live_figures() -> None:
    """Write this process's watched gauges to its file (multiprocess mode)."""
    for gauge, read in _live.values():
        gauge.set(read())


@contextlib.asynccontextmanager
async def live_figures_written(every_s: float = 1.0) -> AsyncIterator[None]:
    """While the block runs, this process's watched gauges are written every
    ``every_s`` in multiprocess mode: a scrape served by another API process
    reads them from the files, so they are at most that old. (In one
    process they are read at the scrape itself.)"""
    if MULTIPROC_DIR is None:
        yield
        return

    async def write() -> None:
        while True:
            write_live_figures()
            await asyncio.sleep(every_s)

    task = asyncio.create_task(write())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def queue_is_stale() -> bool:
    return time.monotonic() - _queue_read_at >= QUEUE_TTL_S


def set_queue(rows: Iterable[tuple[str, str, int, float | None]]) -> None:
    """(kind, status, count, age in seconds of the oldest) from the outbox."""
    global _queue_read_at
    _QUEUE.rows = list(rows)
    _queue_read_at = time.monotonic()


class _Queue(Collector):
    """The outbox as last read from the database: the service's figures, not
    a process's, so whichever process is scraped reports its own reading."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int, float | None]] = []

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "keepmem_jobs",
            "Jobs in the outbox by kind and status (pending, dispatched, running, dead).",
            labels=["kind", "status"],
        )
        oldest = GaugeMetricFamily(
            "keepmem_jobs_oldest_pending_age_seconds",
            "Age of the oldest job waiting to run (pending or dispatched), by kind.",
            labels=["kind"],
        )
        waiting: dict[str, float] = {}
        for kind, status, count, age in self.rows:
            jobs.add_metric([kind, status], count)
            if status in ("pending", "dispatched") and age is not None:
                waiting[kind] = max(waiting.get(kind, 0.0), age)
        for kind, age in waiting.items():
            oldest.add_metric([kind], age)
        yield jobs
        yield oldest


class _Processes(Collector):
    """Every API process's figures: the files of ``directory`` merged, and
    the memory and CPU of each live process (those with live gauges: the
    CLI removes a dead process's) labelled with its ``pid``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files = MultiProcessCollector(None, path=str(directory))  # type: ignore[no-untyped-call]

    def describe(self) -> list[Metric]:
        return []  # the names depend on the files

    def collect(self) -> Iterator[Metric]:
        write_live_figures()  # the scraped process's own, as of now
        yield from self.files.collect()  # type: ignore[no-untyped-call]
        merged: dict[str, Metric] = {}
        for pid in self._live_pids():
            for family in _process_figures(pid):
                into = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for sample in family.samples:
                    into.add_sample(sample.name, {**sample.labels, "pid": pid}, sample.value)
        yield from merged.values()

    def _live_pids(self) -> list[str]:
        # prometheus_client's file names: gauge_livesum_<pid>.db
        names = (p.name for p in self.directory.glob("gauge_live*_*.db"))
        return sorted({name.removesuffix(".db").rsplit("_", 1)[-1] for name in names})


def _process_figures(pid: str) -> Iterable[Metric]:
    return ProcessCollector(pid=lambda: pid, registry=None).collect()


_QUEUE = _Queue()
if MULTIPROC_DIR is None:
    ProcessCollector(registry=REGISTRY)  # memory, CPU, open files of this process
else:
    REGISTRY.register(_Processes(Path(MULTIPROC_DIR)))
REGISTRY.register(_QUEUE)


_serving: set[tuple[str, int]] = set()


def serve(port: int, host: str) -> None:
    """This process's metrics on their own port (the worker's); once per
    process (a worker restarted in-process after a Redis outage keeps it)."""
    if (host, port) in _serving:
        return
    start_http_server(port, addr=host, registry=REGISTRY)
    _serving.add((host, port))
