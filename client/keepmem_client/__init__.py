"""keepmem-client: the Python SDK of keepmem, the memory service for AI agents.

The names below load on first use: the hook command (``keepmem_client.hooks``)
runs on every event of a coding agent and must start without importing httpx
and pydantic.
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
        Collection,
        CollectionItem,
        CollectionRun,
        CompactResult,
        ContextMessage,
        Deleted,
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
    "Collection",
    "CollectionItem",
    "CollectionRun",
    "CompactResult",
    "ConflictError",
    "ContextMessage",
    "Deleted",
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
    "RateLimitError",
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
            "Collection",
            "CollectionItem",
            "CollectionRun",
            "CompactResult",
            "ContextMessage",
            "Deleted",
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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'keepmem_client' has no attribute {name!r}")
    module = importlib.import_module(f"keepmem_client.{_HOMES.get(name, '_errors')}")
    value = getattr(module, name)
    globals()[name] = value
    return value
