"""Per-request context that crosses layers without being passed by hand."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)

#: The tenant a request or job acts for, once known (for log lines).
tenant_var: ContextVar[str | None] = ContextVar("tenant", default=None)

#: Named durations (ms) a request spent in its parts, for the Server-Timing header.
timings_var: ContextVar[dict[str, float] | None] = ContextVar("timings", default=None)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Add the block's duration to this request's ``Server-Timing`` entry ``name``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        spent = timings_var.get()
        if spent is not None:
            spent[name] = spent.get(name, 0.0) + (time.perf_counter() - start) * 1000


class Journal:
    """What a request changed, for its audit entry: the notes the change
    feed recorded, and whether a service wrote an audit entry of its own."""

    __slots__ = ("notes", "recorded")

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.recorded = False


#: Set by the API's unit of work for each request (None outside requests).
journal_var: ContextVar[Journal | None] = ContextVar("journal", default=None)
