"""`keepmem up --replicas 1` as a subprocess: notes written through the API
reach the standby; a standby killed with SIGKILL is restarted; and the
failover of issue 38: under a steady write load the primary's postmaster is
killed with SIGKILL, the standby is promoted (`keepmem promote`'s code), and
the API (not restarted) reconnects to it by itself. With synchronous commit
every acknowledged write is on the new primary; without it, the acknowledged
writes missing (the loss window) are counted and reported, not asserted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.cli import replication
from app.cli.embedded import EmbeddedError
from tests import upstack

WRITERS = 4


def _start(data_dir: Path, *options: str) -> upstack.Stack:
    """``keepmem up --replicas 1`` (two API processes)."""
    env = {"KEEPMEM_GRAPH_PROVIDER": "none", "KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB": "128"}
    return upstack.start(data_dir, "--workers", "2", "--replicas", "1", *options, env=env)


class Writers:
    """A few threads putting notes one after another through the API,
    recording every acknowledged write and every answer."""

    def __init__(self, url: str, key: str, prefix: str) -> None:
        self.url, self.key, self.prefix = url, key, prefix
        self.acknowledged: list[str] = []
        self.statuses: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(WRITERS)
        ]

    def __enter__(self) -> Writers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self, n: int) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as client:
            i = 0
            while not self.stop.is_set():
                note_id = f"{self.prefix}{n}-{i}"
                i += 1
                try:
                    status = client.post(
                        "/v1/notes", json={"id": note_id, "content": f"Write {i} of {n}."}
                    ).status_code
                except httpx.TransportError:
                    status = 0
                with self._lock:
                    self.statuses.append((time.monotonic(), status))
                    if status == 200:
                        self.acknowledged.append(note_id)
                if status != 200:
                    time.sleep(0.05)

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def ok_since(self, moment: float) -> int:
        with self._lock:
            return sum(1 for t, s in self.statuses if t > moment and s == 200)


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(EmbeddedError):  # (a server still starting)
            if predicate():
                return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _ids(server: replication.EmbeddedPostgres, prefix: str) -> set[str]:
    """The notes of ``server`` whose id starts with ``prefix`` (as the
    superuser: every tenant)."""
    out = server.psql(f"SELECT id FROM notes WHERE id LIKE '{prefix}%'", "keepmem")
    return set(out.split())


def _postmaster(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def test_notes_reach_the_standby_and_a_killed_standby_comes_back(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    stack = _start(data_dir)
    url, key = stack.url, stack.key
    standby = replication.Standby(data_dir / "replica-1", name="replica-1")
    try:
        assert standby.in_recovery()
        with Writers(url, key, "a") as load:
            _wait(lambda: load.count() >= 30, 60, "the first writes")
            written = set(load.acknowledged)
            _wait(lambda: written <= _ids(standby, "a"), 30, "the writes on the standby")

            killed = _postmaster(standby.pgdata)
            os.kill(killed, signal.SIGKILL)
            _wait(
                lambda: standby.alive() and _postmaster(standby.pgdata) != killed,
                60,
                "the standby to be restarted",
            )
            moment = time.monotonic()
            _wait(lambda: load.ok_since(moment) >= 10, 60, "writes after the restart")
        _wait(standby.in_recovery, 60, "the restarted standby to take reads")
        _wait(lambda: set(load.acknowledged) <= _ids(standby, "a"), 30, "the standby caught up")
        # Asynchronous commit: the primary never waited for the standby.
        assert {s for _, s in load.statuses} == {200}
    finally:
        text = stack.stop()
    assert "replica-1 is down" in text and "replica-1 restarted" in text, text[-3000:]


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "asynchronous"])
def test_failover_under_load(
    tmp_path: Path, synchronous: bool, record_property: pytest.RecordProperty
) -> None:
    data_dir = tmp_path / "d"
    options = ["--synchronous-standby"] if synchronous else []
    stack = _start(data_dir, *options)
    url, key, log = stack.url, stack.key, stack.log
    standby = replication.Standby(data_dir / "replica-1", name="replica-1")
    try:
        with Writers(url, key, "w") as load:
            _wait(lambda: load.count() >= 100, 60, "the first writes")
            before = load.count()
            # The primary's machine is lost: its postmaster dies at once...
            os.kill(_postmaster(data_dir / "pg"), signal.SIGKILL)
            killed = time.monotonic()
            # ...and the operator promotes the standby (`keepmem promote`).
            assert replication.promote_stack(data_dir) == "replica-1"
            promoted = time.monotonic()
            # The API reconnects by itself: writes succeed again.
            _wait(lambda: load.ok_since(promoted) >= 50, 60, "writes on the new primary")
            recovered = min(t for t, s in load.statuses if t > promoted and s == 200)
        assert not standby.in_recovery()
        old_primary = replication.Standby(data_dir, name="old primary")  # (its pg/)
        assert not old_primary.alive(), "the old primary was restarted after the failover"
        statuses = {s for _, s in load.statuses}
        assert statuses <= {0, 200, 503}, statuses  # never a 500

        present = _ids(standby, "w")
        missing = [i for i in load.acknowledged if i not in present]
        outage = recovered - killed
        report = (
            f"failover ({'synchronous' if synchronous else 'asynchronous'} commit): "
            f"{len(load.acknowledged)} writes acknowledged ({before} before the kill), "
            f"{len(missing)} missing after promotion; writes resumed "
            f"{outage:.1f}s after the kill"
        )
        print(report)  # noqa: T201 - the loss window is reported, not asserted
        record_property("failover", report)
        if synchronous:
            assert not missing, f"acknowledged writes lost: {missing[:10]}"
        # The API answers from the new primary (read through it, not the database).
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as client:
            last = load.acknowledged[-1]
            assert client.get(f"/v1/notes/{last}").status_code == 200
        # The supervisor sees the dead primary on its next round and leaves it down.
        told = "replica-1 was promoted; the old primary stays down"
        _wait(lambda: told in log.read_text(), 60, "the supervisor to see the promotion")
    finally:
        text = stack.stop()
    assert told in text, text[-3000:]
    assert "postgresql restarted" not in text, text[-3000:]
