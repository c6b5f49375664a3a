"""keepmem-client: the Python SDK of keepmem, the memory service for AI agents."""

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
    CompactResult,
    Deleted,
    ImportResult,
    Job,
    JobPage,
    Note,
    ScoredNote,
    SearchResult,
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
    "CompactResult",
    "ConflictError",
    "Deleted",
    "ImportResult",
    "InternalServerError",
    "Job",
    "JobPage",
    "Keepmem",
    "KeepmemError",
    "NotFoundError",
    "Note",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "ScoredNote",
    "SearchResult",
    "ServiceUnavailableError",
    "ValidationError",
    "Version",
    "VersionList",
]
