"""Logging of repeated failures: one line per kind of failure, at most once
a period, with a count of the ones left out.

During an outage every request fails the same way; a traceback each would
bury the log (an outside probe saw 6.5 MB in two minutes). The first failure
of a kind is logged as one line; the same kind again within ``every``
seconds is counted, and the count goes out with the next line.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from app.request_vars import request_id_var, tenant_var

_lock = threading.Lock()
_last: dict[str, float] = {}
_left_out: dict[str, int] = {}


def _admit(kind: str, every: float) -> int | None:
    """None when ``kind`` was logged within ``every`` seconds (it is counted);
    else how many were left out since its last line."""
    now = time.monotonic()
    with _lock:
        last = _last.get(kind)
        if last is not None and now - last < every:
            _left_out[kind] = _left_out.get(kind, 0) + 1
            return None
        _last[kind] = now
        return _left_out.pop(kind, 0)


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
    left_out = _admit(kind, every)
    if left_out is None:
        return False
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


class Throttle(logging.Filter):
    """:func:`log_failure`'s rule for a library's loggers: a line of one kind
    (the logger, the message before its arguments, the exception type) at
    most once a period, with a count of the ones left out. A library that
    logs per request (the MCP SDK: a traceback per failed read) would
    otherwise write a line, or a stack, for every request."""

    def __init__(self, every: float = 60.0) -> None:
        super().__init__()
        self.every = every

    def filter(self, record: logging.LogRecord) -> bool:
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        left_out = _admit(f"{record.name}:{record.msg}:{exc_type}", self.every)
        if left_out is None:
            return False
        if left_out:
            record.msg = f"{record.msg} (and {left_out} more like it since the last report)"
        return True

    @classmethod
    def install(cls, prefix: str, every: float = 60.0) -> None:
        """Throttle every logger named ``prefix`` or under it that exists
        now (a filter applies to the records of the logger it is on)."""
        throttle = cls(every)
        names = [
            prefix,
            *(n for n in logging.root.manager.loggerDict if n.startswith(prefix + ".")),
        ]
        for name in names:
            logger = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(throttle)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request
    id and tenant id of the request or job it happened in, and the
    traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": request_id_var.get(),
            "tenant_id": tenant_var.get(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(log_format: str, level: str) -> None:
    """Logging of a keepmem process (serve, worker): JSON lines or text, on
    stderr, at ``level`` (uvicorn's and arq's loggers included)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "arq"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
