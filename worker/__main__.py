"""``python -m worker``: run an ARQ worker with keepmem's settings."""

from __future__ import annotations

import logging

from arq.worker import run_worker

from worker.settings import WorkerSettings, redis_settings


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    run_worker(WorkerSettings, redis_settings=redis_settings())  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
