"""What a change means to someone watching a project (``GET /v1/events``,
webhooks): the ``kind`` a change-feed row carries beside keep's mutation."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    PUT = "put"  # a note written (new, or new content or tags by put)
    TAG = "tag"  # tags changed by a tag request
    DELETE = "delete"
    MOVE = "move"  # versions moved between notes (both notes get one)
    REVERT = "revert"  # the newest version dropped, the previous one restored
    SUMMARY = "summary"  # the worker's summary of the current content is in
    EMBEDDING = "embedding"  # the current content's vector is in (searchable by meaning)
    PARTS = "parts"  # the note's parts were made (analyze)
    FAILED = "failed"  # a fetch or OCR gave up: the note says why
    CHECKPOINT = "checkpoint"  # a coding-agent session's checkpoint was written
    COMPACTION = "compaction"  # a session's host compacted its context
    PATTERN = "pattern"  # a recurring error, fix or decision was seen (again)
    MEMORY_ADDED = "memory_added"  # a memory formed (new, or a new belief about a slot)
    MEMORY_UPDATED = "memory_updated"  # a memory restated with more (a new version of it)
    MEMORY_SUPERSEDED = "memory_superseded"  # a newer memory replaced (or retracted) this one


#: keep's own mutation names (its export reads only these).
KEEP_MUTATIONS = (
    "doc_insert",
    "doc_delete",
    "doc_update",
    "part_insert",
    "part_update",
    "part_delete",
    "version_insert",
    "version_update",
    "version_delete",
    "edge_insert",
    "edge_update",
    "edge_delete",
)
#: A change only watchers see (no keep mutation stands for it).
WATCH_ONLY = "event"
