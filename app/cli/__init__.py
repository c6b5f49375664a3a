"""The ``keepmem`` command and what it runs beside the service: the
embedded PostgreSQL and Redis of ``keepmem up`` (``embedded``), the
supervisor that keeps its processes alive (``supervisor``), process-wide
settings of the long-running processes (``process``) and the migrations
runner (``migrate``)."""

from __future__ import annotations


def main() -> None:
    """The ``keepmem`` entry point (``app.cli:main``); the commands load
    only when the command runs, so the worker can use ``process`` alone."""
    from app.cli.commands import main as run

    run()
