"""Several API processes (`keepmem serve --workers N`) on the suite's
database: every process answers, `/metrics` counts the requests of them all
(and keeps counting those of one that died and was started again), SIGTERM
lets a request in flight finish and leaves no process behind; `--workers 1`
serves from the command's own process, as before.

Which process answered is what `/v1/health` says (`pid`, part of keep's
health document); which processes serve is what the system says (psutil:
the command's children that listen on the port)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.cli.embedded import free_port
from tests.conftest import ADMIN_TOKEN, SECRET, Stack, Tenant

CLI = [sys.executable, "-c", "from app.cli import main; main()"]


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    port: int

    def api_processes(self) -> set[int]:
        """The command's children that listen on its port."""
        found = set()
        for child in psutil.Process(self.proc.pid).children():
            try:
                sockets = child.net_connections("tcp")
            except psutil.NoSuchProcess:
                continue
            if any(s.status == psutil.CONN_LISTEN and s.laddr.port == self.port for s in sockets):
                found.add(child.pid)
        return found


def _serve(stack: Stack, workers: int, *, sigint_ignored: bool = False, **env: str) -> Served:
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
    environ |= {
        "KEEPMEM_DATABASE_URL": stack.app_url,
        "KEEPMEM_REDIS_URL": stack.redis.url,
        "KEEPMEM_SECRET_KEY": SECRET,
        "KEEPMEM_ADMIN_TOKEN": ADMIN_TOKEN,
        "KEEPMEM_RATE_LIMIT_PER_MINUTE": "0",
        **env,
    }
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", str(port), "--workers", str(workers)],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a shell starts a program in the background (CI, nohup)
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        if sigint_ignored
        else None,
    )
    assert proc.stdout is not None
    # The exports are printed once, when every process serves.
    for line in proc.stdout:
        if line.startswith("# for the keep CLI"):
            return Served(proc, f"http://127.0.0.1:{port}", port)
    proc.wait()
    raise AssertionError(f"keepmem serve exited: {proc.stderr.read() if proc.stderr else ''}")


@pytest.fixture
def served(request: pytest.FixtureRequest, stack: Stack) -> Iterator[Served]:
    one = _serve(stack, request.param)
    try:
        yield one
    finally:
        if one.proc.poll() is None:  # a test that failed: stopped as it should be
            one.proc.send_signal(signal.SIGTERM)
            try:
                one.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                one.proc.kill()
                one.proc.wait()


def _health_pid(url: str) -> int:
    # A connection of its own each time: the kernel hands it to any process.
    r = httpx.get(f"{url}/v1/health", headers={"Connection": "close"}, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["pid"])


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    r = httpx.get(
        f"{url}/metrics",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Connection": "close"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def _health_count(found: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
    labels = frozenset({"method": "GET", "route": "/v1/health", "status": "200"}.items())
    return found.get(("keepmem_http_request_duration_seconds_count", labels), 0.0)


def _pids_measured(found: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[int]:
    return {
        int(dict(labels)["pid"])
        for name, labels in found
        if name == "process_resident_memory_bytes" and found[(name, labels)] > 0
    }


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("served", [2], indirect=True)
async def test_every_process_answers_and_metrics_count_them_all(
    served: Served, tenant: Tenant
) -> None:
    api = served.api_processes()
    assert len(api) == 2 and served.proc.pid not in api
    # (no worker runs here: the note's embedding waits in the outbox)
    put = httpx.post(f"{served.url}/v1/notes", json={"content": "queued"}, headers=tenant.headers)
    assert put.status_code == 200, put.text

    answered: list[int] = []
    with ThreadPoolExecutor(8) as pool:
        for _ in range(25):  # rounds of 8 at once, until both have answered
            answered += pool.map(lambda _: _health_pid(served.url), range(8))
            if set(answered) == api:
                break
    assert set(answered) == api, (set(answered), api)

    # Whichever process is scraped, the figures are the service's: the sum
    # of both processes' counts, their histogram merged, both measured.
    for _ in range(4):
        found = _scrape(served.url)
        assert _health_count(found) == len(answered)
        inf = frozenset(
            {"method": "GET", "route": "/v1/health", "status": "200", "le": "+Inf"}.items()
        )
        assert found[("keepmem_http_request_duration_seconds_bucket", inf)] == len(answered)
        assert _pids_measured(found) == api
        assert found[("keepmem_db_pool_connections", frozenset({("state", "size")}))] == 2 * 10
        pending = frozenset({"kind": "embed", "status": "pending"}.items())
        assert found[("keepmem_jobs", pending)] >= 1

    # One dies: the supervisor starts another; what the dead one counted
    # still counts, and its memory and CPU are no longer reported.
    dead = min(api)
    os.kill(dead, signal.SIGKILL)
    _wait(lambda: len(served.api_processes() - {dead}) == 2, "a new API process")
    now = served.api_processes()
    for _ in range(8):
        answered.append(_health_pid(served.url))
    assert set(answered) - api <= now
    _wait(lambda: _pids_measured(_scrape(served.url)) == now, "the dead process to leave")
    assert _health_count(_scrape(served.url)) == len(answered)

    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=60) == 0
    assert served.proc.stderr is not None
    logged = [json.loads(line) for line in served.proc.stderr.read().splitlines() if line.strip()]
    assert any("is down; restarting it" in line["message"] for line in logged), logged


@pytest.mark.parametrize("served", [2], indirect=True)
async def test_sigterm_finishes_a_request_in_flight_and_leaves_no_process(
    served: Served, tenant: Tenant, client: httpx.AsyncClient
) -> None:
    everything = {p.pid for p in psutil.Process(served.proc.pid).children(recursive=True)}
    api = served.api_processes()
    assert len(api) == 2 and api <= everything

    # A put whose body arrives in two parts: the second only once both API
    # processes have stopped listening (SIGTERM received).
    first_sent, release = threading.Event(), threading.Event()

    def body() -> Iterator[bytes]:
        yield b'{"id": "in-flight", "content": "sent '
        first_sent.set()
        release.wait(60)
        yield b'across the shutdown"}'

    answer: list[httpx.Response] = []

    def put() -> None:
        headers = {**tenant.headers, "Content-Type": "application/json"}
        answer.append(httpx.post(f"{served.url}/v1/notes", content=body(), headers=headers))

    sender = threading.Thread(target=put)
    sender.start()
    try:
        assert first_sent.wait(30)

        def connected() -> bool:
            return any(
                s.status == psutil.CONN_ESTABLISHED and s.laddr.port == served.port
                for pid in api
                for s in psutil.Process(pid).net_connections("tcp")
            )

        _wait(connected, "the put to reach an API process", 30)
        time.sleep(0.3)  # its headers read: the request is in flight
        served.proc.send_signal(signal.SIGTERM)
        _wait(lambda: not served.api_processes(), "the API processes to stop accepting", 30)
    finally:
        release.set()
        sender.join(60)
    assert answer and answer[0].status_code == 200, answer and answer[0].text

    assert served.proc.wait(timeout=60) == 0
    _wait(lambda: not any(psutil.pid_exists(pid) for pid in everything), "every child to end", 20)
    r = await client.get("/v1/notes/in-flight", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["summary"] == "sent across the shutdown"


@pytest.mark.parametrize("served", [1], indirect=True)
def test_one_worker_serves_from_the_command_itself(served: Served) -> None:
    assert {_health_pid(served.url) for _ in range(4)} == {served.proc.pid}
    assert served.api_processes() == set()
    found = _scrape(served.url)
    assert _health_count(found) == 4
    assert found[("process_resident_memory_bytes", frozenset())] > 0  # no pid label


def test_workers_must_be_a_positive_number() -> None:
    done = subprocess.run(
        [*CLI, "serve", "--workers", "0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "number of processes" in done.stderr


def test_the_listening_socket_says_it_is_tcp_so_answers_are_not_held_back() -> None:
    """asyncio turns Nagle's algorithm off only on sockets whose protocol is
    IPPROTO_TCP; with it on, an answer written in two parts waited for the
    client's delayed ACK (about 40 ms a request, seen in bench/search.py)."""
    import socket

    from app.cli.serving import _listener

    for balanced in (True, False):
        sock = _listener("127.0.0.1", 0, balanced=balanced)
        try:
            assert sock.proto == socket.IPPROTO_TCP
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        finally:
            sock.close()


def test_sigint_stops_every_process_even_when_started_with_it_ignored(stack: Stack) -> None:
    """A program a shell starts in the background inherits SIGINT ignored:
    keepmem still stops on it (CI's `keepmem up` once ran on, its API
    processes serving, after the test's SIGINT)."""
    served = _serve(stack, 2, sigint_ignored=True)
    everything = {p.pid for p in psutil.Process(served.proc.pid).children(recursive=True)}
    served.proc.send_signal(signal.SIGINT)
    try:
        assert served.proc.wait(timeout=60) == 0
    except subprocess.TimeoutExpired:
        served.proc.kill()
        raise
    _wait(lambda: not any(psutil.pid_exists(pid) for pid in everything), "every child to end", 20)
