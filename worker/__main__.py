"""``python -m worker``: run an ARQ worker with keepmem's settings.

When Redis goes away the ARQ worker stops with a connection error; nothing is
lost (jobs wait in the Postgres outbox), so we wait and start it again.
SIGTERM / SIGINT end it for good.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

from arq.worker import run_worker
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app import logs
from app.cli import process
from app.providers.errors import MissingDependency
from app.providers.factory import missing_model_wheels, model_wheels_hint
from app.settings import get_settings
from worker.settings import WorkerSettings, redis_settings

log = logging.getLogger("keepmem.worker")


def main() -> None:
    process.limit_malloc_arenas()  # before any thread starts
    settings = get_settings()
    if missing := settings.unset("database_url", "redis_url"):
        sys.stderr.write(f"keepmem worker: set {' and '.join(missing)} (or run `keepmem up`)\n")
        raise SystemExit(2)
    if models := missing_model_wheels(settings):
        # jobs would fail one by one; say it once, before taking any
        raise SystemExit(f"keepmem worker: {model_wheels_hint(models)}")
    logs.configure(settings.log_format, settings.log_level)
    if settings.worker_nice > 0:
        # Background work yields the CPU to the API on shared machines.
        os.nice(settings.worker_nice)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt

    while not stopping:
        try:
            run_worker(WorkerSettings, redis_settings=redis_settings())  # type: ignore[arg-type]
            return  # a signal ended the worker cleanly
        except MissingDependency as exc:
            # a model or provider package is not installed: restarting cannot help
            raise SystemExit(f"keepmem worker: {exc}") from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            log.warning("redis unavailable (%s); restarting the worker in 2 s", exc)
            # Between runs no ARQ handler is installed: make signals end the wait.
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
            try:
                time.sleep(2)
            except KeyboardInterrupt:
                return


if __name__ == "__main__":
    main()
