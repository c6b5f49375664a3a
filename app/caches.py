"""Small per-process caches on the request path (held in ``app.state``).

Projects never change id once made, so (tenant, slug) -> project is safe to
remember. Key "last used" times need writing at most once a minute per key,
so the write is skipped while a recent one is known.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        return None

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._items.popitem(last=False)


class RequestCaches:
    TOUCH_EVERY = 60.0

    def __init__(self) -> None:
        # (tenant id, slug) -> project id: plain values, never ORM rows.
        self.projects: LRU[tuple[uuid.UUID, str], uuid.UUID] = LRU(10_000)
        self._touched: LRU[uuid.UUID, float] = LRU(10_000)

    def needs_touch(self, key_id: uuid.UUID) -> bool:
        last = self._touched.get(key_id)
        now = time.monotonic()
        if last is not None and now - last < self.TOUCH_EVERY:
            return False
        self._touched.put(key_id, now)
        return True
