"""A synchronous face over keepmem's async code, for keep (which calls its
stores from plain threads).

One event loop runs in a daemon thread of its own; :meth:`Bridge.call` hands
it a coroutine and waits for the result, so any number of keep's threads can
call at once and none of them runs async code itself. A call made from the
loop's own thread would wait for itself forever: it is refused. ``close``
runs the clean-up coroutine given, stops the loop and joins the thread;
calls after it are refused.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLEANUP_SECONDS = 10.0


class BridgeClosed(RuntimeError):
    pass


class Bridge:
    def __init__(self, *, timeout: float = 120.0, name: str = "keepmem-store") -> None:
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False
        self._lock = threading.Lock()
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the bridge's loop and return its result (or raise
        its exception) in the calling thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a store call from inside the store's own loop would deadlock")
        with self._lock:
            if self._closed:
                coro.close()
                raise BridgeClosed("this keepmem store is closed")
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(self.timeout)

    def close(self, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run ``cleanup`` on the loop, then stop it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if sys.is_finalizing() or not self._thread.is_alive():
            return  # interpreter shutdown: the loop's thread is gone or frozen
        try:
            if cleanup is not None:

                async def run_cleanup() -> None:
                    await cleanup()

                asyncio.run_coroutine_threadsafe(run_cleanup(), self._loop).result(CLEANUP_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.timeout)
            self._loop.close()

    @property
    def closed(self) -> bool:
        return self._closed
