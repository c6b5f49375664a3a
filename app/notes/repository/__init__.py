"""The note aggregate's SQL, one module per table: ``notes`` (one note's row)
and ``listing`` (many notes at a time), ``versions``, ``parts``, ``vectors``
(embeddings), ``edges`` (edges from edge tags) and ``changes`` (the change
feed). Only the notes domain writes through it (tests/test_architecture.py
checks); graph, search, events and the pipeline read through it.

The package re-exports the functions of the four note-row modules, so
``from app.notes import repository as repo`` reads ``repo.get``,
``repo.list_versions``; ``vectors``, ``edges`` and ``changes`` are imported
as modules of their own."""

from __future__ import annotations

from app.notes.repository.listing import (
    ListQuery,
    count,
    family,
    holding_key,
    list_notes,
    neighbours_in_time,
    sharing_tags,
)
from app.notes.repository.notes import (
    clear_pending_content,
    delete_note,
    get,
    get_many,
    insert_note,
    insert_notes,
    set_expiry,
    touch_accessed,
    update_note,
)
from app.notes.repository.parts import (
    delete_parts,
    get_part,
    get_parts_many,
    insert_parts,
    list_parts,
    parts_of_many,
    passages_among,
)
from app.notes.repository.versions import (
    all_versions,
    archive_current,
    count_history,
    count_versions,
    delete_versions,
    insert_version_text,
    insert_versions,
    list_versions,
    max_version,
    version_at,
    version_number,
    versions_of_many,
)

__all__ = [
    "ListQuery",
    "all_versions",
    "archive_current",
    "clear_pending_content",
    "count",
    "count_history",
    "count_versions",
    "delete_note",
    "delete_parts",
    "delete_versions",
    "family",
    "get",
    "get_many",
    "get_part",
    "get_parts_many",
    "holding_key",
    "insert_note",
    "insert_notes",
    "insert_parts",
    "insert_version_text",
    "insert_versions",
    "list_notes",
    "list_parts",
    "list_versions",
    "max_version",
    "neighbours_in_time",
    "parts_of_many",
    "passages_among",
    "set_expiry",
    "sharing_tags",
    "touch_accessed",
    "update_note",
    "version_at",
    "version_number",
    "versions_of_many",
]
