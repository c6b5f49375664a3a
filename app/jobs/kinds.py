"""Job names, defined once and shared by the API (which enqueues) and the worker."""

from __future__ import annotations

from enum import StrEnum


class JobKind(StrEnum):
    EMBED = "embed"
    SUMMARIZE = "summarize"
    ANALYZE = "analyze"
    REINDEX = "reindex"


class JobStatus(StrEnum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"
    SUPERSEDED = "superseded"
