"""Job names, defined once and shared by the API (which enqueues) and the worker."""

from __future__ import annotations

from enum import StrEnum


class JobKind(StrEnum):
    EMBED = "embed"
    SUMMARIZE = "summarize"
    ANALYZE = "analyze"
    REINDEX = "reindex"
    TASK = "task"  # keep's task delegation (/v1/tasks): work on content sent with the task
    TERM_STATS = "term_stats"  # count a big project's common words (find's full-text stage)


#: Kinds that read a note's held content; it is let go when none remain open.
CONTENT_KINDS = ("embed", "summarize", "analyze")


class JobStatus(StrEnum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"
    SUPERSEDED = "superseded"
