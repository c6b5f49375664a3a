"""Logging of repeated failures: one line per kind of failure, at most once
a period, with a count of the ones left out.

During an outage every request fails the same way; a traceback each would
bury the log (an outside probe saw 6.5 MB in two minutes). The first failure
of a kind is logged as one line; the same kind again within ``every``
seconds is counted, and the count goes out with the next line.
"""

from __future__ import annotations

import logging
import threading
import time

_lock = threading.Lock()
_last: dict[str, float] = {}
_left_out: dict[str, int] = {}


def log_failure(
    logger: logging.Logger,
    what: str,
    exc: BaseException,
    *,
    every: float = 60.0,
    traceback: bool = False,
) -> bool:
    """Log ``what`` failed with ``exc`` unless that kind was logged recently
    (a kind: the logger, ``what`` up to any parenthesis, the exception type).
    ``traceback`` adds the stack to the logged line (unexpected errors).

    Returns whether a line was written."""
    kind = f"{logger.name}:{what.split(' (')[0]}:{type(exc).__name__}"
    now = time.monotonic()
    with _lock:
        last = _last.get(kind)
        if last is not None and now - last < every:
            _left_out[kind] = _left_out.get(kind, 0) + 1
            return False
        _last[kind] = now
        left_out = _left_out.pop(kind, 0)
    more = f" (and {left_out} more like it since the last report)" if left_out else ""
    logger.warning(
        "%s: %s: %s%s",
        what,
        type(exc).__name__,
        str(exc)[:300],
        more,
        exc_info=exc if traceback else None,
    )
    return True
