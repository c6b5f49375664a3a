"""Per-key request rate limit: a fixed one-minute window counted in Redis.

It fails open: when Redis is unreachable, requests pass (and the outage shows
in /v1/ready) rather than a queue outage taking the whole API down.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from app.errors import TooManyRequests

log = logging.getLogger("keepmem.ratelimit")


async def check(redis: Any, *, key_id: uuid.UUID, limit_per_minute: int) -> None:
    if redis is None or limit_per_minute <= 0:
        return
    window = int(time.time() // 60)
    bucket = f"keepmem:rl:{key_id}:{window}"
    try:
        async with redis.pipeline(transaction=True) as pipe:
            pipe.incr(bucket)
            pipe.expire(bucket, 61)
            count, _ = await pipe.execute()
    except Exception as exc:  # noqa: BLE001 - fail open, see the module doc
        log.warning("rate limit skipped, redis unavailable: %s", type(exc).__name__)
        return
    if int(count) > limit_per_minute:
        retry_after = 60 - int(time.time()) % 60
        raise TooManyRequests(
            f"rate limit of {limit_per_minute} requests per minute exceeded for this key",
            headers={"Retry-After": str(retry_after)},
        )
