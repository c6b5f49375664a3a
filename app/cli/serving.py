"""Serving the API: in this process (one worker), or as several API
processes on one port (``KEEPMEM_API_WORKERS``, ``--workers``).

Why several: one process's Python saturates one core while PostgreSQL waits
on it (issue 36). The parent checks the port is free and starts each API
process with ``spawn`` (a fresh interpreter: no copy of the parent's threads,
pools or event loop); each builds the app from the parent's settings and
listens on the port, on Linux with a socket of its own (``SO_REUSEPORT``:
the kernel spreads new connections evenly, see ``BALANCED``), elsewhere on
one socket the parent bound and hands to them all. They share nothing but
the database and Redis. What must happen once stays in the parent:
migrations, the first tenant, the "serving on" lines and the URL recorded in
the data directory (``commands``), the metrics directory (``app.metrics``),
and the supervision: an API process that dies is started again by the
``Supervisor``.

Stopping: SIGINT or SIGTERM to the parent reaches every API process as
SIGTERM; each fails readiness, ends its event streams, stops accepting, gives
in-flight requests ``KEEPMEM_SHUTDOWN_GRACE_SECONDS`` and runs its lifespan's
shutdown. The parent waits for them all before it goes on (``keepmem up``
then stops the worker, Redis and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from app import logs
from app.cli import process
from app.settings import Settings

# An API process's imports and lifespan startup, on a busy machine.
START_SECONDS = 120.0
# prometheus_client's multiprocess mode (app.metrics reads it in each API process).
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
STARTUP_FAILURE = 3  # uvicorn's exit code for an app that cannot start
# Linux spreads new connections over the sockets bound to one port with
# SO_REUSEPORT (by a hash of their addresses). One socket shared by every
# process leaves it to whichever wakes first, and asyncio accepts every
# queued connection at once: 8 connections opened together by a client pool
# went 0 / 8 and 7 / 1 to two processes in two of four runs (issue 36).
BALANCED = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def server_config(app: Any, settings: Settings, *, host: str, port: int) -> Any:
    """How uvicorn serves ``app`` (a ``uvicorn.Config``), in ``serve`` and ``up``.

    Forwarded headers (``X-Forwarded-For``, ``-Proto``) are believed only from
    ``KEEPMEM_TRUSTED_PROXIES``: uvicorn's own default believes any peer on
    127.0.0.1, so a client on the same host (or behind an untrusted hop)
    could give each failed login a new address and never meet the limit on
    failed authentications."""
    import uvicorn

    proxies = settings.trusted_proxies
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,  # logs.configure's handlers (JSON lines by default)
        log_level=settings.log_level.lower(),
        lifespan="on",
        proxy_headers=bool(proxies),
        forwarded_allow_ips=list(proxies) if proxies else [],
        # SIGTERM: stop accepting, let in-flight requests finish this long.
        timeout_graceful_shutdown=settings.shutdown_grace_seconds,
    )


def _server(config: Any, *, sigint: bool = True) -> Any:
    """A uvicorn server whose app begins draining when a stop signal comes
    (not SIGINT when ``sigint`` is false)."""
    import uvicorn

    from app.main import drain

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if sig == signal.SIGINT and not sigint:
                return
            drain(self.config.app)  # event streams end instead of holding the shutdown
            super().handle_exit(sig, frame)

    return Server(config)


async def _run(
    server: Any, sockets: list[socket.socket] | None, on_started: Callable[[], None]
) -> None:
    task = asyncio.create_task(server.serve(sockets=sockets))
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn has no event
        await asyncio.sleep(0.05)
    if server.started:
        on_started()
    await task


def _app_server(settings: Settings, host: str, port: int, *, sigint: bool = True) -> Any:
    from app.main import create_app

    logs.configure(settings.log_format, settings.log_level)
    app = create_app(settings)
    return _server(server_config(app, settings, host=host, port=port), sigint=sigint)


def serve_here(settings: Settings, host: str, port: int, *, on_started: Callable[[], None]) -> int:
    """The API in this process (one worker): uvicorn binds, serves and
    handles the signals itself."""
    server = _app_server(settings, host, port)
    asyncio.run(_run(server, None, on_started))
    return 0 if server.started else 1


# -- several processes -----------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _child(
    settings: Settings,
    host: str,
    port: int,
    sock: socket.socket | None,
    parent: int,
    told: Connection,
) -> None:
    """An API process: build the app, serve on the port, tell the parent
    once serving."""
    process.exit_with_parent(parent)
    # Ctrl-C reaches the whole process group: the parent answers it with a
    # SIGTERM to each API process, the one signal they stop on (a SIGINT on
    # top would make uvicorn skip the lifespan's shutdown). After a clean
    # shutdown uvicorn raises SIGTERM again: it then ends this process, 0.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    process.limit_malloc_arenas()
    try:
        server = _app_server(settings, host, port, sigint=False)
        # Bound last: connections the kernel gives this socket wait for it.
        listener = sock if sock is not None else _listener(host, port, balanced=True)
        asyncio.run(_run(server, [listener], lambda: told.send(True)))
        code = 0 if server.started else STARTUP_FAILURE
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    # The lifespan has closed what needed closing: the interpreter's own
    # teardown of the whole app would hold the stop ~1.5 s more for nothing.
    logging.shutdown()
    os._exit(code)


class ApiProcess:
    """One API process on the port: a part the supervisor restarts."""

    def __init__(
        self, number: int, settings: Settings, host: str, port: int, sock: socket.socket | None
    ) -> None:
        self.name = f"api process {number}"
        self._args = (settings, host, port, sock)
        self.proc: BaseProcess | None = None
        self._told: Connection | None = None
        self.metrics_dir: str | None = None

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        told_here, told_there = context.Pipe(duplex=False)
        args = (*self._args, os.getpid(), told_there)
        proc = context.Process(target=_child, args=args, name=self.name)
        proc.start()
        told_there.close()
        self.proc, self._told = proc, told_here

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def serving(self) -> bool:
        """Whether it has said it serves (False while it starts or after it died)."""
        told = self._told
        if told is None:
            return False
        with contextlib.suppress(EOFError, OSError):
            if told.poll():
                told.recv()
                self._told = None
                return True
        return False

    def restart(self) -> None:
        self._bury()
        self.start()

    def terminate(self) -> None:
        if self.alive() and self.pid is not None:
            os.kill(self.pid, signal.SIGTERM)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` for it to end; then kill it."""
        if self.proc is None:
            return
        self.proc.join(max(timeout, 0.0))
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self._bury()

    def _bury(self) -> None:
        """Its live gauges leave the metrics (its counters stay in the sums)."""
        if self.proc is None:
            return
        self.proc.join(0)
        if self.metrics_dir is not None and self.proc.pid is not None:
            from prometheus_client.multiprocess import mark_process_dead

            mark_process_dead(self.proc.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        if self._told is not None:
            self._told.close()
            self._told = None


def serve_processes(
    settings: Settings,
    host: str,
    port: int,
    workers: int,
    *,
    on_started: Callable[[], None],
    stopping: Callable[[], None] = lambda: None,
    say: Callable[[str], None] | None = None,
) -> int:
    """``workers`` API processes on one port, supervised until SIGINT or
    SIGTERM, which is raised here as KeyboardInterrupt once every one of them
    has stopped (``stopping`` is called first). 1 if they cannot start."""
    # Imported before the variable is set: this process keeps its own
    # metrics (it serves none) in memory, not in the API processes' files.
    import prometheus_client.multiprocess  # noqa: F401

    from app.cli.supervisor import Supervisor

    logs.configure(settings.log_format, settings.log_level)
    tell = say or _log
    # Both stop the processes. SIGINT is set too, not left to Python's
    # default: a program started in the background by a shell (CI, nohup)
    # inherits SIGINT ignored, and Ctrl-C's signal then did nothing.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        # Bound here first, so that a port in use (another keepmem's, say)
        # is said at once; on Linux closed again (each process binds its own).
        sock: socket.socket | None = _listener(host, port, balanced=False)
    except OSError as exc:
        tell(f"keepmem: cannot listen on {host}:{port}: {exc.strerror or exc}")
        return 1
    if BALANCED:
        assert sock is not None
        sock.close()  # each API process binds its own
        sock = None
    metrics_dir = tempfile.mkdtemp(prefix="keepmem-metrics-")
    os.environ[METRICS_DIR] = metrics_dir
    processes = [ApiProcess(n, settings, host, port, sock) for n in range(1, workers + 1)]
    supervisor: Supervisor | None = None
    try:
        for api in processes:
            api.metrics_dir = metrics_dir
            api.start()
        if not _all_serving(processes, tell):
            return 1
        on_started()
        supervisor = Supervisor(list(processes), say=say)
        supervisor.start()
        while True:  # until the signal's KeyboardInterrupt
            time.sleep(3600)
    finally:
        stopping()
        if supervisor is not None:
            supervisor.stop()  # nothing is restarted from here on
        for api in processes:
            api.terminate()
        deadline = time.monotonic() + settings.shutdown_grace_seconds + 10
        for api in processes:
            api.join(deadline - time.monotonic())
        if sock is not None:
            sock.close()
        os.environ.pop(METRICS_DIR, None)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _log(line: str) -> None:
    logging.getLogger("keepmem.serving").warning(line.removeprefix("keepmem: "))


def _listener(host: str, port: int, *, balanced: bool) -> socket.socket:
    """A socket bound to the port: ``balanced``, one of the API processes'
    (``SO_REUSEPORT``), else one for them all to share."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle's algorithm off only on
    # sockets that say they are TCP, and with it on every answer written in
    # two parts waited for the client's delayed ACK (about 40 ms a request,
    # bench/search.py: server 27 ms, client 72 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if balanced:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _all_serving(processes: list[ApiProcess], tell: Callable[[str], None]) -> bool:
    """Wait until every process serves; False (said why) if one ends first."""
    waiting = list(processes)
    deadline = time.monotonic() + START_SECONDS
    while waiting:
        for api in list(waiting):
            if api.serving():
                waiting.remove(api)
            elif not api.alive():
                code = api.proc.exitcode if api.proc is not None else None
                tell(f"keepmem: {api.name} ended while starting (exit code {code}); see above")
                return False
        if time.monotonic() > deadline:
            tell(f"keepmem: {waiting[0].name} did not start within {START_SECONDS:.0f}s")
            return False
        time.sleep(0.05)
    return True
