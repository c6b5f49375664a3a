"""keep's store bookkeeping that keepmem does its own way, accepted and
changing nothing: keep's edge tables and their backfills (keepmem keeps the
graph itself, from the tags' edge rules and graph extraction, on every
write: ``/v1/graph``), and keep's local outboxes for markdown mirrors and
sync (keepmem has its change feed and ``/v1/events``)."""

from __future__ import annotations

from typing import Any


class Bookkeeping:
    def backfill_exists(self, collection: str, predicate: str) -> bool:
        return True

    def upsert_backfill(self, *args: Any, **kwargs: Any) -> None:
        return None

    def delete_edges_for_source(self, collection: str, source_id: str) -> int:
        return 0

    def delete_edges_for_target(self, collection: str, target_id: str) -> int:
        return 0

    def delete_version_edges_for_source(self, collection: str, source_id: str) -> int:
        return 0

    def delete_version_edges_for_target(self, collection: str, target_id: str) -> int:
        return 0

    def delete_edges_for_predicate(self, collection: str, predicate: str) -> int:
        return 0

    def delete_version_edges_for_predicate(self, collection: str, predicate: str) -> int:
        return 0

    def backfill_version_edges_for_predicate(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def get_backfill_status(self, collection: str, predicate: str) -> str | None:
        return "completed"

    def delete_backfill(self, collection: str, predicate: str) -> None:
        return None

    def upsert_edge(self, *args: Any, **kwargs: Any) -> None:
        return None

    def upsert_edges_batch(self, collection: str, edges: list[Any]) -> int:
        return 0

    def has_edges(self, collection: str) -> bool:
        return False

    def get_forward_edges(self, collection: str, source_id: str) -> list[tuple[str, str, str]]:
        return []  # keepmem's graph: GET /v1/graph/walk

    def get_inverse_edges(self, collection: str, target_id: str) -> list[tuple[str, str, str]]:
        return []

    def find_edge_targets(self, collection: str, query: str) -> list[str]:
        return []

    # -- keep's local outboxes (markdown mirrors, sync): keepmem has its change feed --

    def dequeue_outbox(self, limit: int = 50, claim_id: str | None = None) -> list[dict[str, Any]]:
        return []

    def complete_outbox(self, outbox_ids: list[int]) -> None:
        return None

    def fail_outbox(self, outbox_ids: list[int]) -> None:
        return None

    def dequeue_sync_outbox(
        self, limit: int = 50, claim_id: str | None = None
    ) -> list[dict[str, Any]]:
        return []

    def complete_sync_outbox(self, outbox_ids: list[int]) -> None:
        return None

    def sync_outbox_bounds(self) -> tuple[int | None, int | None]:
        return (None, None)

    def list_sync_outbox_since(
        self, *, after_outbox_id: int = 0, limit: int = 50
    ) -> list[dict[str, Any]]:
        return []

    def release_thread_connection(self) -> None:
        return None  # one pool for every thread
