"""The keep backend's synchronous face (app/keepstore/bridge.py) and its
settings, without keep: many threads calling at once, errors crossing
over, the deadlock guard, a clean close."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.keepstore.bridge import Bridge, BridgeClosed
from app.keepstore.connection import BackendConfigError, Params


def test_threads_call_the_one_loop_and_errors_cross_over() -> None:
    bridge = Bridge(timeout=10)
    loops: set[int] = set()

    async def work(n: int) -> int:
        loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.01)
        return n * 2

    results: list[int] = []
    threads = [
        threading.Thread(target=lambda n=n: results.append(bridge.call(work(n)))) for n in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [n * 2 for n in range(20)] and len(loops) == 1

    async def fails() -> None:
        raise KeyError("from the loop")

    with pytest.raises(KeyError, match="from the loop"):
        bridge.call(fails())

    async def nested() -> None:
        bridge.call(work(1))  # from the loop's own thread: would wait for itself

    with pytest.raises(RuntimeError, match="deadlock"):
        bridge.call(nested())

    cleaned: list[bool] = []

    async def cleanup() -> None:
        cleaned.append(True)

    bridge.close(cleanup)
    bridge.close(cleanup)  # once only
    assert cleaned == [True] and bridge.closed
    with pytest.raises(BridgeClosed):
        bridge.call(work(1))


def test_backend_params_are_checked() -> None:
    env = {"KEEPMEM_DATABASE_URL": "postgresql://app@/db", "KEEPMEM_SECRET_KEY": "s"}
    p = Params.read({"api_key": "km_x", "project": "notes"}, env)
    assert (p.database_url, p.api_key, p.secret_key, p.project) == (
        "postgresql://app@/db", "km_x", "s", "notes",
    )  # fmt: skip
    with pytest.raises(BackendConfigError, match="api_key"):
        Params.read({}, env)
    with pytest.raises(BackendConfigError, match="unknown backend_params"):
        Params.read({"api_key": "k", "databse_url": "typo"}, env)
    with pytest.raises(BackendConfigError, match="project"):
        Params.read({"api_key": "k", "project": "Not A Slug"}, env)
