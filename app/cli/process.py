"""Process-wide settings of keepmem's long-running processes."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
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


PR_SET_PDEATHSIG = 1  # Linux prctl option


def exit_with_parent(parent: int) -> None:
    """SIGTERM to this process when ``parent``, which started it, dies
    (Linux): a ``keepmem`` killed with SIGKILL leaves no API process holding
    its port, and the signal stops each as gracefully as any SIGTERM. (The
    kernel watches the parent's thread that started the process: one the
    supervisor's thread restarted gets the signal when that thread ends,
    which it does when the parent stops them all.)"""
    if sys.platform.startswith("linux") and (name := ctypes.util.find_library("c")):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)
