"""keep's storage backend on keepmem's PostgreSQL (``[store] backend =
"keepmem"`` in keep.toml; the ``keep.backends`` entry point ``keepmem``).

A local keep then reads and writes keepmem's own tables, through keepmem's
repositories and row-level security, as the tenant and project of an API
key: what it writes the REST API sees and the other way round. Background
work is keepmem's (``NullPendingQueue``: keep's queue stays empty): keepmem's
workers embed every note with keepmem's model and extract its graph, in the
job outbox written in the same transaction as the note, so nothing queued is
lost with a local process and the hosted side can find the note. Vectors a
local keep computes itself are kept under its own model's identity.
"""

from __future__ import annotations

from typing import Any

from app.keepstore.connection import BackendConfigError, Connection, Params
from app.keepstore.documents import KeepmemDocumentStore
from app.keepstore.vectors import KeepmemVectorStore

__all__ = ["BackendConfigError", "create_stores"]


def create_stores(config: Any) -> Any:
    """keep's backend factory: ``config`` is keep's ``StoreConfig``."""
    from keep.backend import (  # keep is the caller
        NullPendingQueue,
        StoreBundle,
    )

    params = Params.read(dict(getattr(config, "backend_params", None) or {}))
    connection = Connection(params)
    identity = getattr(config, "embedding_identity", None)
    return StoreBundle(
        doc_store=KeepmemDocumentStore(connection),
        vector_store=KeepmemVectorStore(connection, dimension=getattr(identity, "dimension", None)),
        pending_queue=NullPendingQueue(),
        is_local=False,
    )
