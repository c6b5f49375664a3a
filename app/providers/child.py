"""CPU-bound model work in a child process the worker can stop.

Why: a model that runs Python or Cython without releasing the GIL (spaCy's
tokenizer is quadratic on some inputs) would stall the worker's event loop
(every other job, heartbeats) for as long as it runs, and a thread cannot be
stopped. A child process can: each call has a time limit, and a child that
overruns it is killed, its call fails with ``ChildTimeout`` (a permanent
error: the same input would overrun again), and the next call starts a new
child. The child loads its model once (``setup``) and then serves one call
at a time; callers queue on an asyncio lock, so waiting holds no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from app.providers.errors import PermanentError, TransientError

START_SECONDS = 180.0  # loading a model in a fresh interpreter on a busy machine


class ChildTimeout(PermanentError):
    """The call overran its time limit; the child was stopped."""


class ChildDied(TransientError):
    """The child ended without answering (killed from outside, out of memory)."""


def _serve(conn: Connection, work: Callable[[Any], Any], setup: Callable[[], object]) -> None:
    """The child's loop: load, say ready, then answer calls until the parent goes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        setup()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("failed", f"{type(exc).__name__}: {exc}", isinstance(exc, PermanentError)))
        return
    conn.send(("ready", None, False))
    while True:
        try:
            arg = conn.recv()
        except (EOFError, OSError):
            return  # the parent closed the pipe or died
        try:
            conn.send(("ok", work(arg), False))
        except Exception as exc:  # noqa: BLE001 - the call fails, the child lives on
            conn.send(("failed", f"{type(exc).__name__}: {exc}", isinstance(exc, PermanentError)))


class Child:
    """One child process running ``work`` (a module-level function) after
    ``setup``, started on first use and again after it was stopped."""

    def __init__(self, name: str, work: Callable[[Any], Any], setup: Callable[[], object]) -> None:
        self.name = name
        self._work = work
        self._setup = setup
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def pid(self) -> int | None:
        """The running child's process id (None before the first call or after a stop)."""
        return self._process.pid if self._process is not None else None

    async def call(self, arg: Any, *, timeout_seconds: float) -> Any:
        """``work(arg)`` in the child, or ``ChildTimeout`` after ``timeout_seconds``
        of it (the child is killed). Time spent queueing or starting a child
        does not count."""
        loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            conn = await self._started()
            try:
                try:
                    await asyncio.to_thread(conn.send, arg)
                except OSError as exc:  # it died between two calls
                    self.stop()
                    raise ChildDied(f"{self.name} ended before the call") from exc
                if not await _readable(conn, timeout_seconds):
                    self.stop()
                    raise ChildTimeout(
                        f"{self.name} stopped after {timeout_seconds:g} s (its time limit): "
                        "the input costs too much to process"
                    )
                return self._answer(conn)
            except asyncio.CancelledError:
                self.stop()  # its half-done work would delay the next call
                raise

    async def _started(self) -> Connection:
        if self._conn is not None and self._process is not None and self._process.is_alive():
            return self._conn
        self.stop()
        context = multiprocessing.get_context("spawn")  # no forked copy of the worker's threads
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve, args=(child, self._work, self._setup), name=self.name, daemon=True
        )
        await asyncio.to_thread(process.start)
        child.close()
        self._process, self._conn = process, parent
        try:
            ready = await _readable(parent, START_SECONDS)
        except asyncio.CancelledError:
            self.stop()
            raise
        if not ready:
            self.stop()
            raise ChildDied(f"{self.name} did not start within {START_SECONDS:g} s")
        try:
            self._answer(parent)  # "ready", or why its setup failed
        except Exception:
            self.stop()
            raise
        return parent

    def _answer(self, conn: Connection) -> Any:
        try:
            status, value, permanent = conn.recv()
        except (EOFError, OSError) as exc:
            self.stop()
            raise ChildDied(f"{self.name} ended without answering") from exc
        if status == "failed":
            raise (PermanentError if permanent else TransientError)(value)
        return value

    def stop(self) -> None:
        """Kill the child (if any); the next call starts another."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
            with contextlib.suppress(ValueError):
                process.close()


async def _readable(conn: Connection, timeout_seconds: float) -> bool:
    """Wait, without a thread, until ``conn`` has data or is closed; False on timeout."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = conn.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(ready, timeout_seconds)
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    return True
