"""The notes domain's entry point: keep's put / get / list / tag / delete /
move / versions / parts rules.

The use cases live by kind: ``writing`` (put, tag, system notes, analysis
requests), ``reading`` (get, list, count, parts), ``history`` (delete or
revert, move, versions), ``profile`` (the project's counts, keep's ``stats``)
and ``derived`` (what background work writes: summaries,
vectors, parts, give-ups). Services take ``(session, scope, *, ...)``, never
commit and never import FastAPI or arq; SQL lives in the repositories.
"""

from __future__ import annotations

from app.notes.batch import MAX_BATCH, BatchItem, put_many
from app.notes.common import PENDING_TAG, valid_id
from app.notes.edges import backfill as backfill_edges
from app.notes.edges import queue_backfill
from app.notes.history import DeleteResult, VersionEntry, delete, move, versions
from app.notes.profile import profile
from app.notes.reading import (
    ListInput,
    ListResult,
    count,
    family,
    get,
    get_as_of,
    list_notes,
    parts,
    sharing,
)
from app.notes.seeding import seed_system_docs, system_doc_ids
from app.notes.stubs import stub
from app.notes.tag_policy import rules as tag_rules
from app.notes.tagging import tag
from app.notes.writing import PutInput, put, request_analysis
from app.settings import Limits

__all__ = [
    "MAX_BATCH",
    "PENDING_TAG",
    "BatchItem",
    "DeleteResult",
    "Limits",
    "ListInput",
    "ListResult",
    "PutInput",
    "VersionEntry",
    "backfill_edges",
    "count",
    "delete",
    "family",
    "get",
    "get_as_of",
    "list_notes",
    "move",
    "parts",
    "profile",
    "put",
    "put_many",
    "queue_backfill",
    "request_analysis",
    "seed_system_docs",
    "sharing",
    "stub",
    "system_doc_ids",
    "tag",
    "tag_rules",
    "valid_id",
    "versions",
]
