"""Request rate limits: token buckets kept in Redis.

A bucket holds up to ``per_minute`` tokens and refills continuously at
``per_minute / 60`` tokens a second; a request takes one. Unlike a fixed
window there is no edge to burst across: over any 60 seconds at most
``2 * per_minute`` requests pass, and over a long run ``per_minute``.

Three kinds of bucket: one per API key (every authenticated request); one
per client address that only failed authentications draw from: past it,
a key-guessing client gets 429s instead of answers; and one per client
address for OAuth client registrations (open to anyone).

All fail open: when Redis is unreachable, requests pass (the outage shows in
/v1/ready) rather than a queue outage taking the whole API down.

An authenticated request makes one Redis round trip (:func:`admit`): one
script takes the key's token, counts the tenant's request of the day and
reads the key-revocation epoch (``app.caches.KeyCache``).

And one count kept in the process: :class:`StreamSlots`, the long-lived
responses (``GET /v1/events``, ``GET /mcp``) a tenant holds open.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError

from app.errors import DailyQuotaExceeded, TooManyRequests
from app.logs import log_failure

log = logging.getLogger("keepmem.ratelimit")

# A token bucket in Lua, shared by both scripts: take ``cost`` tokens from
# the bucket ``key`` (refilled at ``rate`` a second up to ``capacity``).
# State: tokens, updated-at. _TAKE: KEYS[1] bucket; ARGV: now (s), capacity,
# refill per second, cost; returns {allowed 0/1, tokens left * 1000}.
_BUCKET = """
local function take(key, now, capacity, rate, cost)
  local state = redis.call('HMGET', key, 't', 'u')
  local tokens = tonumber(state[1])
  local updated = tonumber(state[2])
  if tokens == nil then
    tokens = capacity
    updated = now
  end
  tokens = math.min(capacity, tokens + math.max(0, now - updated) * rate)
  local allowed = 0
  if tokens >= cost then
    tokens = tokens - cost
    allowed = 1
  end
  if cost > 0 or allowed == 0 then
    redis.call('HSET', key, 't', tokens, 'u', now)
    redis.call('EXPIRE', key, math.ceil(capacity / rate) + 1)
  end
  return allowed, tokens
end
"""
_TAKE = (
    _BUCKET
    + """
local allowed, tokens = take(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]),
                             tonumber(ARGV[3]), tonumber(ARGV[4]))
return {allowed, math.floor(tokens * 1000)}
"""
)


@dataclass(frozen=True, slots=True)
class Quota:
    """What a bucket said: the ``X-RateLimit-*`` headers and, if refused, Retry-After."""

    limit: int
    remaining: int
    reset_seconds: int  # until the bucket is full again
    retry_after: int | None = None

    @property
    def headers(self) -> dict[str, str]:
        out = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_seconds),
        }
        if self.retry_after is not None:
            out["Retry-After"] = str(self.retry_after)
        return out


async def _take(redis: Any, bucket: str, per_minute: int, cost: int) -> Quota | None:
    rate = per_minute / 60.0
    try:
        allowed, milli = await redis.eval(_TAKE, 1, bucket, time.time(), per_minute, rate, cost)
    except Exception as exc:  # noqa: BLE001 - fail open, see the module doc
        log_failure(log, "rate limit skipped, redis unavailable", exc)
        return None
    return _quota(per_minute, bool(allowed), int(milli))


def _quota(per_minute: int, allowed: bool, milli: int) -> Quota:
    rate = per_minute / 60.0
    tokens = milli / 1000
    return Quota(
        limit=per_minute,
        remaining=max(0, math.floor(tokens)),
        reset_seconds=math.ceil((per_minute - tokens) / rate),
        retry_after=None if allowed else max(1, math.ceil((1 - tokens) / rate)),
    )


# One round trip for an authenticated request. KEYS[1] the key's bucket,
# KEYS[2] the tenant's count of the day, KEYS[3] the key-revocation epoch.
# ARGV: now (s), capacity (0: no bucket), refill per second, the epoch the
# caller's key was cached under ('' when it was looked up just now), the
# day count's TTL. Returns {allowed 0/1, tokens left * 1000 (-1: no bucket),
# requests today (-1: not counted), epoch}; {-1, ...} when the cached key is
# stale: then nothing is taken or counted (the caller looks the key up
# again and asks again). A refused request is not counted against the day.
# (One script over three keys needs one Redis server: a Redis Cluster would
# need the three names in one hash slot.)
_ADMIT = (
    _BUCKET
    + """
local epoch = redis.call('GET', KEYS[3]) or '0'
if ARGV[4] ~= '' and ARGV[4] ~= epoch then
  return {-1, -1, -1, epoch}
end
local allowed = 1
local milli = -1
local capacity = tonumber(ARGV[2])
if capacity > 0 then
  local tokens
  allowed, tokens = take(KEYS[1], tonumber(ARGV[1]), capacity, tonumber(ARGV[3]), 1)
  milli = math.floor(tokens * 1000)
end
local used = -1
if allowed == 1 then
  used = redis.call('INCR', KEYS[2])
  if used == 1 then
    redis.call('EXPIRE', KEYS[2], tonumber(ARGV[5]))
  end
end
return {allowed, milli, used, epoch}
"""
)
_ADMIT_SHA = hashlib.sha1(_ADMIT.encode(), usedforsecurity=False).hexdigest()
EPOCH_KEY = "keepmem:keys:epoch"
DAY_TTL_S = 2 * 86400


@dataclass(frozen=True, slots=True)
class Admission:
    """What :func:`admit` learnt. ``stale``: the caller's cached key was
    cached before a revocation; nothing was taken or counted."""

    quota: Quota | None = None  # the key's bucket (None: no limit, or Redis down)
    used_today: int | None = None  # the tenant's requests today, this one included
    epoch: str | None = None  # the key-revocation epoch (None: Redis down)
    stale: bool = False


async def admit(
    redis: Any,
    *,
    key_id: object,
    tenant_id: object,
    limit_per_minute: int,
    cached_epoch: str | None = None,
) -> Admission:
    """An authenticated request's one Redis round trip: take a token from
    the key's bucket (429 when it is empty), count the request against the
    tenant's day (:func:`check_day` refuses it past the quota) and read the
    key-revocation epoch. With ``cached_epoch`` (the key came from the key
    cache) and an epoch moved on since, nothing is taken: ``stale``."""
    if redis is None:
        return Admission()
    now = time.time()
    per_minute = max(limit_per_minute, 0)
    keys = (f"keepmem:rl:key:{key_id}", _day_key(tenant_id, _day(now)), EPOCH_KEY)
    args = (now, per_minute, per_minute / 60.0, cached_epoch or "", DAY_TTL_S)
    try:
        try:
            reply = await redis.evalsha(_ADMIT_SHA, len(keys), *keys, *args)
        except NoScriptError:  # a restarted Redis has forgotten it: one more trip
            reply = await redis.eval(_ADMIT, len(keys), *keys, *args)
    except Exception as exc:  # noqa: BLE001 - fail open, see the module doc
        log_failure(
            log, "rate limit and daily quota skipped (not enforced), redis unavailable", exc
        )
        return Admission()
    allowed, milli, used, epoch = (int(reply[0]), int(reply[1]), int(reply[2]), reply[3])
    epoch = epoch.decode() if isinstance(epoch, bytes) else str(epoch)
    if allowed < 0:
        return Admission(epoch=epoch, stale=True)
    quota = _quota(per_minute, allowed == 1, milli) if milli >= 0 else None
    if quota is not None and quota.retry_after is not None:
        raise TooManyRequests(
            f"rate limit of {limit_per_minute} requests per minute exceeded for this key",
            headers=quota.headers,
        )
    return Admission(quota=quota, used_today=used if used >= 0 else None, epoch=epoch)


def check_day(used_today: int | None, *, limit: int | None) -> None:
    """Refuse a request past the tenant's daily quota (if one is set): 429
    until midnight (UTC)."""
    if limit is None or used_today is None or used_today <= limit:
        return
    retry = int(86400 - time.time() % 86400) + 1
    raise DailyQuotaExceeded(
        f"quota exceeded: requests_per_day (limit {limit}); resets at 00:00 UTC",
        headers={"Retry-After": str(retry)},
    )


async def new_key_epoch(redis: Any) -> str | None:
    """A credential ended: a new key-revocation epoch, so every process
    looks its cached keys up again on their next use. The new epoch, or
    None when Redis is down (the cache's TTL bounds the delay then)."""
    if redis is None:
        return None
    epoch = uuid.uuid4().hex
    try:
        await redis.set(EPOCH_KEY, epoch)
    except Exception as exc:  # noqa: BLE001 - the TTL still ends the key
        log_failure(log, "key revocation not published, redis unavailable", exc)
        return None
    return epoch


def _address_bucket(address: str) -> str:
    return f"keepmem:rl:auth:{address}"


async def count_failure(redis: Any, *, address: str, failures_per_minute: int) -> None:
    """A failed authentication from ``address`` takes a token from its bucket;
    once the bucket is empty the answer is 429 instead of 401 (a guesser
    learns nothing more). Successful requests never touch this bucket."""
    if redis is None or failures_per_minute <= 0:
        return
    quota = await _take(redis, f"keepmem:rl:auth:{address}", failures_per_minute, 1)
    if quota is not None and quota.retry_after is not None:
        raise TooManyRequests(
            "too many failed authentications from this address; wait and retry",
            headers=quota.headers,
        )


async def count_registration(redis: Any, *, address: str, per_minute: int) -> None:
    """An OAuth client registration from ``address`` (an unauthenticated
    write) takes a token from that address's bucket; 429 when it is empty."""
    if redis is None or per_minute <= 0:
        return
    quota = await _take(redis, f"keepmem:rl:register:{address}", per_minute, 1)
    if quota is not None and quota.retry_after is not None:
        raise TooManyRequests(
            f"at most {per_minute} client registrations per minute from one address; "
            "wait and retry (a client registers once and keeps its client_id)",
            headers=quota.headers,
        )


def _day_key(tenant_id: object, day: str) -> str:
    return f"keepmem:quota:requests:{tenant_id}:{day}"


def _day(now: float) -> str:
    return time.strftime("%Y%m%d", time.gmtime(now))


async def requests_today(redis: Any, tenant_id: object) -> int | None:
    """Requests counted today (None when Redis cannot say)."""
    if redis is None:
        return None
    try:
        value = await redis.get(_day_key(tenant_id, _day(time.time())))
    except Exception as exc:  # noqa: BLE001
        log_failure(log, "daily request count unavailable", exc)
        return None
    return int(value) if value is not None else 0


async def forget_tenant(redis: Any, tenant_id: object, key_ids: list[Any]) -> None:
    """Drop what Redis holds of an erased tenant (daily counts, key buckets)."""
    if redis is None:
        return
    try:
        names = [f"keepmem:rl:key:{k}" for k in key_ids]
        async for name in redis.scan_iter(match=_day_key(tenant_id, "*")):
            names.append(name)
        if names:
            await redis.delete(*names)
    except Exception as exc:  # noqa: BLE001 - they expire within two days anyway
        log_failure(log, "could not clear an erased tenant's counters", exc)


class StreamSlots:
    """The event streams (``GET /v1/events`` and ``GET /mcp`` together) each
    tenant holds open in this process: at most ``per_tenant``; one more is a
    429 (``rate_limited``, Retry-After). A stream holds its slot until it ends,
    however it ends."""

    RETRY_AFTER_S = 10

    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self._open: dict[object, int] = {}

    def take(self, tenant_id: object) -> None:
        """Hold one of the tenant's slots (give it back with :meth:`give_back`)."""
        held = self._open.get(tenant_id, 0)
        if held >= self.per_tenant:
            raise TooManyRequests(
                f"at most {self.per_tenant} open event streams per tenant (GET /v1/events and "
                "GET /mcp together): close one, or use a webhook",
                headers={"Retry-After": str(self.RETRY_AFTER_S)},
            )
        self._open[tenant_id] = held + 1

    def give_back(self, tenant_id: object) -> None:
        left = self._open.get(tenant_id, 0) - 1
        if left > 0:
            self._open[tenant_id] = left
        else:
            self._open.pop(tenant_id, None)

    @contextmanager
    def held(self, tenant_id: object) -> Iterator[None]:
        """A slot for the duration of the block (429 when none is free)."""
        self.take(tenant_id)
        try:
            yield
        finally:
            self.give_back(tenant_id)

    def open(self, tenant_id: object) -> int:
        """Streams the tenant holds open."""
        return self._open.get(tenant_id, 0)

    def total(self) -> int:
        """Streams open in this process (the ``keepmem_event_streams_open`` gauge)."""
        return sum(self._open.values())
