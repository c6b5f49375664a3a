"""keepmem-client: the Python SDK of keepmem, the memory service for AI agents.

The names below load on first use: the hook command (``keepmem_client.hooks``)
runs on every event of a coding agent and must start without importing httpx
and pydantic. ``KeepmemRetriever``, ``keepmem_tools`` and ``render_context``
come from ``keepmem_client.langchain`` (extra ``[langchain]``); they are left
out of ``__all__`` so that ``import *`` works without langchain-core.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keepmem_client._client import AsyncKeepmem, Keepmem
    from keepmem_client._errors import (
        APIConnectionError,
        APIError,
        APITimeoutError,
        AuthenticationError,
        BadRequestError,
        ConflictError,
        InternalServerError,
        KeepmemError,
        NotFoundError,
        PayloadTooLargeError,
        PermissionDeniedError,
        RateLimitError,
        ServiceUnavailableError,
        ValidationError,
    )
    from keepmem_client._models import (
        BatchOut,
        Checkpoint,
        Citation,
        CitationPage,
        CitationVerdict,
        Collection,
        CollectionItem,
        CollectionRun,
        CompactResult,
        ContextMessage,
        CrawlLimits,
        CrawlStarted,
        Deleted,
        Distilled,
        DistilledMemory,
        ImportResult,
        IntakeResult,
        Job,
        JobPage,
        Memory,
        MemoryDetail,
        MemorySettings,
        MemorySource,
        MemorySpend,
        MemoryVersion,
        Message,
        MessagePage,
        MessagesAdded,
        Note,
        Pattern,
        ProjectSettings,
        ProvenanceItem,
        RechunkResult,
        Remembered,
        ResumeContext,
        ScoredNote,
        SearchResult,
        Session,
        SessionSettings,
        SessionState,
        SessionTimeline,
        Thread,
        ThreadContext,
        ThreadDeleted,
        TimelineItem,
        Version,
        VersionList,
    )
    from keepmem_client.langchain import KeepmemRetriever as KeepmemRetriever
    from keepmem_client.langchain import keepmem_tools as keepmem_tools
    from keepmem_client.langchain import render_context as render_context

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AsyncKeepmem",
    "AuthenticationError",
    "BadRequestError",
    "BatchOut",
    "Checkpoint",
    "Citation",
    "CitationPage",
    "CitationVerdict",
    "Collection",
    "CollectionItem",
    "CollectionRun",
    "CompactResult",
    "ConflictError",
    "ContextMessage",
    "CrawlLimits",
    "CrawlStarted",
    "Deleted",
    "Distilled",
    "DistilledMemory",
    "ImportResult",
    "IntakeResult",
    "InternalServerError",
    "Job",
    "JobPage",
    "Keepmem",
    "KeepmemError",
    "Memory",
    "MemoryDetail",
    "MemorySettings",
    "MemorySource",
    "MemorySpend",
    "MemoryVersion",
    "Message",
    "MessagePage",
    "MessagesAdded",
    "NotFoundError",
    "Note",
    "Pattern",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "ProjectSettings",
    "ProvenanceItem",
    "RateLimitError",
    "RechunkResult",
    "Remembered",
    "ResumeContext",
    "ScoredNote",
    "SearchResult",
    "ServiceUnavailableError",
    "Session",
    "SessionSettings",
    "SessionState",
    "SessionTimeline",
    "Thread",
    "ThreadContext",
    "ThreadDeleted",
    "TimelineItem",
    "ValidationError",
    "Version",
    "VersionList",
]

_HOMES = {
    "AsyncKeepmem": "_client",
    "Keepmem": "_client",
    **{
        n: "_models"
        for n in (
            "BatchOut",
            "Checkpoint",
            "Citation",
            "CitationPage",
            "CitationVerdict",
            "Collection",
            "CollectionItem",
            "CollectionRun",
            "CompactResult",
            "ContextMessage",
            "CrawlLimits",
            "CrawlStarted",
            "Deleted",
            "Distilled",
            "DistilledMemory",
            "ImportResult",
            "IntakeResult",
            "Job",
            "JobPage",
            "Memory",
            "MemoryDetail",
            "MemorySettings",
            "MemorySource",
            "MemorySpend",
            "MemoryVersion",
            "Message",
            "MessagePage",
            "MessagesAdded",
            "Note",
            "Pattern",
            "ProjectSettings",
            "ProvenanceItem",
            "RechunkResult",
            "Remembered",
            "ResumeContext",
            "ScoredNote",
            "SearchResult",
            "Session",
            "SessionSettings",
            "SessionState",
            "SessionTimeline",
            "Thread",
            "ThreadContext",
            "ThreadDeleted",
            "TimelineItem",
            "Version",
            "VersionList",
        )
    },
}


# Loaded only when asked for: their module imports an optional dependency.
_OPTIONAL = {"KeepmemRetriever": "langchain", "keepmem_tools": "langchain",
             "render_context": "langchain"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in __all__ and name not in _OPTIONAL:
        raise AttributeError(f"module 'keepmem_client' has no attribute {name!r}")
    home = _OPTIONAL.get(name) or _HOMES.get(name, "_errors")
    module = importlib.import_module(f"keepmem_client.{home}")
    value = getattr(module, name)
    globals()[name] = value
    return value
