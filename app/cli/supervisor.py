"""Keeps the embedded stack's parts running: `keepmem up` supervises the
PostgreSQL server, the Redis server and the worker it started.

Each part says whether it is alive and how to restart it. A watcher thread
looks every second; a dead part is restarted at once, and if that fails,
again after a delay that doubles up to 30 s. One line is printed per death
and per recovery (not per attempt), so an outage cannot flood the log.

The API needs no restart: its connection pool pings before use and opens new
connections once PostgreSQL is back, and answers 503 (code
``database_unavailable``) meanwhile; Redis clients reconnect per command.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("keepmem.supervisor")

MAX_DELAY = 30.0


class Part(Protocol):
    name: str

    def alive(self) -> bool: ...

    def restart(self) -> None: ...


class ChildProcess:
    """A program this process started (the worker): restarted when it exits."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        self.start()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class _Watch:
    part: Part
    down_since: float | None = None
    next_try: float = 0.0
    delay: float = 1.0
    attempts: int = 0
    last_error: str = field(default="")


class Supervisor:
    """Restarts dead parts from a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        parts: list[Part],
        *,
        interval: float = 1.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self._watches = [_Watch(p) for p in parts]
        self._interval = interval
        self._say = say or log.warning
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keepmem-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (before the parts are stopped on purpose)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            for watch in self._watches:
                if self._stopping.is_set():
                    return
                self._check(watch)

    def _check(self, watch: _Watch) -> None:
        part = watch.part
        try:
            if part.alive():
                if watch.down_since is not None:  # came back after a failed attempt
                    took = time.monotonic() - watch.down_since
                    self._say(f"keepmem: {part.name} is back after {took:.1f}s")
                    watch.down_since = None
                return
        except Exception as exc:  # noqa: BLE001 - a failed probe counts as down
            watch.last_error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if watch.down_since is None:
            watch.down_since, watch.next_try, watch.delay, watch.attempts = now, now, 1.0, 0
            self._say(f"keepmem: {part.name} is down; restarting it")
        if now < watch.next_try:
            return
        watch.attempts += 1
        try:
            part.restart()
            up = part.alive()
        except Exception as exc:  # noqa: BLE001 - retried with backoff
            watch.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            up = False
        if up:
            took = time.monotonic() - watch.down_since
            self._say(
                f"keepmem: {part.name} restarted after {took:.1f}s ({watch.attempts} attempt(s))"
            )
            watch.down_since = None
            return
        watch.next_try = time.monotonic() + watch.delay
        if watch.attempts in (3, 10) or watch.attempts % 50 == 0:
            self._say(
                f"keepmem: {part.name} still down after {watch.attempts} attempts "
                f"({watch.last_error or 'not running'}); retrying every {watch.delay:.0f}s"
            )
        watch.delay = min(MAX_DELAY, watch.delay * 2)
