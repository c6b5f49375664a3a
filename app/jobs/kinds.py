"""Job names, defined once and shared by the API (which enqueues) and the worker."""

from __future__ import annotations

from enum import StrEnum


class JobKind(StrEnum):
    EMBED = "embed"
    SUMMARIZE = "summarize"
    ANALYZE = "analyze"
    REINDEX = "reindex"
    TASK = "task"  # keep's task delegation (/v1/tasks): work on content sent with the task
    FETCH = "fetch"  # put by URI: fetch, read, sanitise, then store as content
    OCR = "ocr"  # recognise the text of an upload's images, then store it
    EXTRACT_GRAPH = "extract_graph"  # entities and relations of a note
    TERM_STATS = "term_stats"  # count a big project's common words (find's full-text stage)
    EXPIRE = "expire"  # delete a project's notes past their expiry or the project's retention
    WEBHOOK = "webhook"  # POST a batch of a project's events to one of its webhooks
    SESSION_DIGEST = "session_digest"  # a coding-agent session's new events: observations,
    # patterns, checkpoints, the project's resume block
    MEMORY_EXTRACT = "memory_extract"  # a thread's new messages: memories, reconciled
    AUTO_TAG = "auto_tag"  # the project's model picks a written note's constrained tags
    # (queued after its embedding, when the project's settings say auto_tag)
    CHUNK = "chunk"  # cut a long note into passages: parts with spans, vectors, full text
    EDGE_BACKFILL = "edge_backfill"  # a tag became (or stopped being) an edge tag: the
    # edges of the notes that hold it, a batch at a time
    CRAWL = "crawl"  # a bounded same-site crawl, a batch of pages a job; the next batch
    # is queued with the crawl's state (frontier, seen URLs, pages and bytes used)
    TRANSCRIBE = "transcribe"  # an uploaded audio file's speech to text, then store it


#: Kinds that read a note's held content; it is let go when none remain open.
CONTENT_KINDS = ("embed", "summarize", "analyze", "extract_graph", "chunk")


class Lane(StrEnum):
    """Which slots a job competes for. Slow lanes hold a worker slot long
    (a model over a big note, a receiver's timeout): the dispatcher caps how
    many of their jobs are in flight, in all and per tenant."""

    FOREGROUND = "foreground"  # what a put waits for: embedding, summaries, documents
    BACKGROUND = "background"  # priority >= BACKGROUND_PRIORITY: graph, passages, counts
    REMOTE = "remote"  # waits on another host: webhook deliveries, fetches, crawls


class JobStatus(StrEnum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"
    SUPERSEDED = "superseded"
