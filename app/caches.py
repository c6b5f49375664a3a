"""Small per-process caches on the request path (held in ``app.state``).

A project keeps its id while it exists, so (tenant, slug) -> project is
remembered for a short while (an erased project's slug may be made again,
with a new id; this process forgets at once, others within the TTL). A
tenant's quotas are remembered as briefly. Key "last used" times need
writing at most once a minute per key, so the write is skipped while a
recent one is known. Resolved API keys are remembered for a few seconds
(:class:`KeyCache`): every request would otherwise look its key up in the
database.
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

    def get(self, key: K, ttl: float | None = None) -> V | None:
        """The value, unless older than ``ttl`` (else the cache's own TTL)."""
        item = self._items.get(key)
        if item is None:
            return None
        ttl = self.ttl if ttl is None else ttl
        if ttl is not None and time.monotonic() - item[1] > ttl:
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

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


#: The revocation epoch a process has not learnt yet: it matches no epoch
#: Redis holds, so what was cached under it is checked again.
UNKNOWN_EPOCH = "?"


class KeyCache(Generic[V]):
    """Resolved API keys by their keyed hash (never the key itself), for a
    few seconds, so a request need not look its key up in the database.

    Only keys that resolved and were accepted are held (an unknown key is
    never remembered, so guessing cannot fill memory), at most ``size``.
    Each entry carries the revocation *epoch* it was resolved under: a
    random token in Redis that changes after every revocation (the request's
    one Redis round trip reads it, ``app.ratelimit.admit``). An entry whose
    epoch is no longer Redis's is stale and the key is looked up again, so a
    revocation through any API process ends its key in every process at
    once; what Redis cannot tell (it is down, or a key revoked or a tenant
    disabled in the database by hand) ends within the TTL.
    """

    def __init__(self, size: int = 10_000) -> None:
        self._items: LRU[bytes, tuple[V, str]] = LRU(size)
        # The epoch this process last read from Redis. An entry records the
        # value seen *before* its database lookup began, so a revocation
        # committed after that lookup always makes the entry stale.
        self.epoch = UNKNOWN_EPOCH

    def get(self, key_hash: bytes, ttl: float) -> tuple[V, str] | None:
        """The resolved key and its epoch, if cached within ``ttl`` seconds."""
        return self._items.get(key_hash, ttl) if ttl > 0 else None

    def put(self, key_hash: bytes, value: V, epoch: str) -> None:
        self._items.put(key_hash, (value, epoch))

    def forget(self, key_hash: bytes) -> None:
        self._items.pop(key_hash)

    def forget_all(self, epoch: str | None = None) -> None:
        """Drop every entry (a credential ended); ``epoch``: the new one, if known."""
        self._items.clear()
        if epoch is not None:
            self.epoch = epoch

    def __len__(self) -> int:
        return len(self._items)


SETTINGS_TTL = 5.0
KEY_CACHE_SIZE = 10_000


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
        # key hash -> the resolved key (app.auth.service.authenticate)
        self.keys: KeyCache[Any] = KeyCache(KEY_CACHE_SIZE)

    def needs_touch(self, key_id: uuid.UUID) -> bool:
        last = self._touched.get(key_id)
        now = time.monotonic()
        if last is not None and now - last < self.TOUCH_EVERY:
            return False
        self._touched.put(key_id, now)
        return True
