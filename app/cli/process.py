"""Process-wide settings of keepmem's long-running processes."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = "2"


def limit_malloc_arenas() -> None:
    """At most two glibc malloc arenas (unless MALLOC_ARENA_MAX says
    otherwise), for this process and those it starts.

    glibc gives threads arenas of their own, up to eight per core, and
    memory freed in one is not returned to the system while others hold
    pages: the API's resident memory crept up by ~1.5 MB a minute under a
    steady load with the data's size fixed, and held flat with two arenas
    (bench/soak.py, BENCHMARKS.md). Elsewhere than glibc this does nothing."""
    wanted = os.environ.setdefault("MALLOC_ARENA_MAX", ARENAS)
    if not sys.platform.startswith("linux") or not wanted.isdigit():
        return
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(M_ARENA_MAX, int(wanted))
    except (OSError, AttributeError):
        return
