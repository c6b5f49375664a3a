"""Faults on the embedded stack: `keepmem up` under a steady write load while
its PostgreSQL postmaster and then its Redis server are killed with SIGKILL.

The stack restarts both by itself; requests during the outage get 503s in
the one error shape (never a 500); every write that was acknowledged is
present and embedded afterwards; the log says what happened in a few lines
instead of a traceback per request.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx

from tests import upstack

# lost queue entries are found again quickly (defaults: minutes)
QUICK = {
    "KEEPMEM_JOB_DISPATCH_TIMEOUT_SECONDS": "5",
    "KEEPMEM_JOB_LEASE_SECONDS": "10",
    "KEEPMEM_GRAPH_PROVIDER": "none",
}


class Load(threading.Thread):
    """Puts notes one after another and records what each answer was."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        self.acknowledged: list[str] = []
        self.statuses: list[tuple[float, int, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            note_id = f"load-{i}"
            i += 1
            try:
                r = self.client.post(
                    "/v1/notes",
                    json={"id": note_id, "content": f"Note number {i} about the harbour."},
                )
            except httpx.TransportError:
                self.statuses.append((time.monotonic(), 0, ""))
                time.sleep(0.1)
                continue
            code = r.json().get("code", "") if r.status_code >= 400 else ""
            self.statuses.append((time.monotonic(), r.status_code, code))
            if r.status_code == 200:
                self.acknowledged.append(note_id)
            else:
                time.sleep(0.05)

    def ok_since(self, moment: float) -> bool:
        return any(t > moment and s == 200 for t, s, _ in self.statuses)


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _pid(path: Path) -> int:
    return int(path.read_text().splitlines()[0].strip())


def test_stack_heals_after_postgres_and_redis_are_killed(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    stack = upstack.start(data_dir, env=QUICK, wait=120)
    key, url_line = stack.key, stack.url
    load = Load(url_line, key)
    try:
        load.start()
        _wait(lambda: len(load.acknowledged) >= 20, 60, "the first writes")

        # 1. PostgreSQL's postmaster dies
        pg_pid = _pid(data_dir / "pg" / "postmaster.pid")
        killed_pg = time.monotonic()
        os.kill(pg_pid, signal.SIGKILL)
        _wait(lambda: load.ok_since(killed_pg + 0.5), 90, "writes after PostgreSQL came back")
        outage = [(s, c) for t, s, c in load.statuses if t > killed_pg]
        assert (503, "database_unavailable") in outage, outage[:20]
        with httpx.Client(base_url=url_line, timeout=30) as c:
            assert c.get("/v1/health").status_code == 200
        assert _pid(data_dir / "pg" / "postmaster.pid") != pg_pid

        # 2. Redis dies: writes go on (the outbox holds the jobs), then the
        #    queue comes back and the worker with it
        redis_pid = _pid(data_dir / "redis" / "redis.pid")
        killed_redis = time.monotonic()
        os.kill(redis_pid, signal.SIGKILL)
        _wait(
            lambda: (
                (data_dir / "redis" / "redis.pid").exists()
                and _pid(data_dir / "redis" / "redis.pid") != redis_pid
            ),
            60,
            "a new redis-server",
        )
        _wait(lambda: load.ok_since(killed_redis + 2), 60, "writes after the Redis restart")
        time.sleep(2)
    finally:
        load.stop.set()
        load.join(timeout=60)

    try:
        statuses = [s for _, s, _ in load.statuses]
        assert 500 not in statuses, "a 500 during the outage"
        assert all(s in (0, 200, 503) for s in statuses), sorted(set(statuses))
        acknowledged = load.acknowledged
        assert len(acknowledged) >= 40

        # every acknowledged write is there and gets embedded
        with httpx.Client(
            base_url=url_line, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as c:

            def all_embedded() -> bool:
                listed: dict[str, dict] = {}
                cursor = None
                while True:
                    params = {"prefix": "load-", "limit": 1000}
                    if cursor:
                        params["cursor"] = cursor
                    body = c.get("/v1/notes", params=params).json()
                    listed |= {n["id"]: n for n in body["notes"]}
                    cursor = body["next_cursor"]
                    if not cursor:
                        break
                missing = [i for i in acknowledged if i not in listed]
                assert not missing, f"acknowledged writes lost: {missing[:5]}"
                return all("embed" not in listed[i]["pending"] for i in acknowledged)

            _wait(all_embedded, 240, "every acknowledged note to be embedded")
            found = c.post("/v1/search", json={"query": "harbour", "limit": 5}).json()
            assert found["notes"] and found["pending_embedding"] == 0
    finally:
        text = stack.stop()

    assert "postgresql is down" in text and "postgresql restarted" in text, text[-3000:]
    assert "redis is down" in text and "redis restarted" in text, text[-3000:]
    # one line per kind of failure, not a traceback per failed request
    failed_requests = statuses.count(503)
    assert text.count("Traceback") <= 10, (text.count("Traceback"), failed_requests)


def test_supervisor_restarts_with_backoff_and_says_so_once() -> None:
    """A part that fails to restart is retried with a growing delay; one line
    when it goes down, one when it is back (not a line per attempt)."""
    from app.cli.supervisor import Supervisor

    class Flaky:
        name = "flaky"

        def __init__(self) -> None:
            self.up, self.restarts = True, 0

        def alive(self) -> bool:
            return self.up

        def restart(self) -> None:
            self.restarts += 1
            if self.restarts >= 3:
                self.up = True
            else:
                raise RuntimeError("port still in use")

    said: list[str] = []
    part = Flaky()
    supervisor = Supervisor([part], interval=0.05, say=said.append)
    supervisor.start()
    try:
        part.up = False
        _wait(lambda: part.up, 10, "the third restart")  # delays 1 s, then 2 s
    finally:
        supervisor.stop()
    assert part.restarts == 3
    assert said[0] == "keepmem: flaky is down; restarting it"
    assert said[-1].startswith("keepmem: flaky restarted after") and "(3 attempt(s))" in said[-1]
    assert len(said) == 2
