"""Small per-process caches on the request path (held in ``app.state``).

A project keeps its id while it exists, so (tenant, slug) -> project is
remembered for a short while (an erased project's slug may be made again,
with a new id; this process forgets at once, others within the TTL). A
tenant's quotas are remembered as briefly. Key "last used" times need
writing at most once a minute per key, so the write is skipped while a
recent one is known.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, size: int, ttl: float | None = None) -> None:
        self.size = size
        self.ttl = ttl
        self._items: OrderedDict[K, tuple[V, float]] = OrderedDict()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if self.ttl is not None and time.monotonic() - item[1] > self.ttl:
            del self._items[key]
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V) -> None:
        self._items[key] = (value, time.monotonic())
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def drop(self, match: Callable[[K], bool]) -> None:
        for key in [k for k in self._items if match(k)]:
            del self._items[key]


SETTINGS_TTL = 5.0


class RequestCaches:
    TOUCH_EVERY = 60.0

    def __init__(self) -> None:
        # (tenant id, slug) -> project id: plain values, never ORM rows.
        self.projects: LRU[tuple[uuid.UUID, str], uuid.UUID] = LRU(10_000, ttl=30.0)
        # tenant id -> (requests per day, jobs per day) quotas, None = unlimited
        self.quotas: LRU[uuid.UUID, tuple[int | None, int | None]] = LRU(10_000, ttl=30.0)
        self._touched: LRU[uuid.UUID, float] = LRU(10_000)
        # (tenant id, project id) -> the project's session settings: hook
        # intake cleans with them before its one statement. Briefly: a change
        # made through another API process applies within the TTL.
        self.session_settings: LRU[tuple[uuid.UUID, uuid.UUID], Any] = LRU(10_000, ttl=SETTINGS_TTL)

    def needs_touch(self, key_id: uuid.UUID) -> bool:
        last = self._touched.get(key_id)
        now = time.monotonic()
        if last is not None and now - last < self.TOUCH_EVERY:
            return False
        self._touched.put(key_id, now)
        return True
