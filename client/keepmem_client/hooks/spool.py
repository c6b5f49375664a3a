"""The spool: hooks write events to disk and return; a detached flusher
sends them.

A hook never waits on the network to record something. Each hook process
writes its one event to its own file (``<ns>-<pid>.jsonl``, written under a
temporary name and renamed, so the flusher never reads half a line and no
two writers share a file), then starts ``python -m keepmem_client.hooks
flush`` in a new session unless a flusher already holds the lock. The
flusher sends files oldest first, deletes what keepmem took (2xx) or
refused as bad input (4xx but 401/403/408/429: logged, then dropped, so one
poison event cannot block the spool), keeps the rest when keepmem is down,
and exits when the spool is empty or keepmem does not answer.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from keepmem_client.hooks.env import HookEnv, headers

BATCH = 50
MAX_FILES = 10_000
MAX_BYTES = 50 * 1024 * 1024
LOG_BYTES = 256 * 1024
STATE_DAYS = 7
LOCK_NAME = "flush.lock"
# 401/403: a wrong key, fixed by the user, after which the events are
# still good; 408/429: come back later. Every other 4xx is the event's fault.
_RETRY_4XX = {401, 403, 408, 429}


class Outcome:
    """What keepmem did with a batch."""

    SENT = "sent"
    REFUSED = "refused"
    RETRY = "retry"


def log_error(spool_dir: Path, message: str) -> None:
    """Append a line to the spool's small error log (rotated at 256 KiB);
    never raises, since it is what the error paths call."""
    try:
        spool_dir.mkdir(parents=True, exist_ok=True)
        path = spool_dir / "errors.log"
        if path.exists() and path.stat().st_size > LOG_BYTES:
            path.replace(spool_dir / "errors.log.1")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {message[:2000]}\n")
    except OSError:
        pass


def write_event(env: HookEnv, event: dict[str, Any]) -> Path:
    """Spool one event; returns its file."""
    env.spool_dir.mkdir(parents=True, exist_ok=True)
    # The destination travels with the event: two CLIs on one machine may
    # point at different projects, and one flusher sends for both. The key
    # does not: it stays in the environment, never on disk.
    line = json.dumps({"url": env.url, "project": env.project, "event": event}, ensure_ascii=False)
    name = f"{time.time_ns():020d}-{os.getpid()}"
    tmp = env.spool_dir / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    final = env.spool_dir / f"{name}.jsonl"
    tmp.replace(final)
    return final


def spooled(spool_dir: Path) -> list[Path]:
    """The spooled files, oldest first."""
    try:
        return sorted(spool_dir.glob("*.jsonl"))
    except OSError:
        return []


@contextmanager
def flush_lock(spool_dir: Path) -> Iterator[bool]:
    """Hold the flusher lock while inside; yields False when another
    process has it (never waits)."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(spool_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def start_flusher(env: HookEnv) -> bool:
    """Start a detached flusher unless one runs; returns whether it started."""
    with flush_lock(env.spool_dir) as free:
        if not free:
            return False
    subprocess.Popen(
        [sys.executable, "-m", "keepmem_client.hooks", "flush"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the hook, and the host's Ctrl-C
        close_fds=True,
    )
    return True


def enforce_cap(spool_dir: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> int:
    """Drop the oldest files past the caps; returns how many were dropped."""
    files = spooled(spool_dir)
    sizes = []
    for path in files:
        try:
            sizes.append(path.stat().st_size)
        except OSError:
            sizes.append(0)
    total, dropped = sum(sizes), 0
    for path, size in zip(files, sizes, strict=True):
        if len(files) - dropped <= max_files and total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
        dropped += 1
    if dropped:
        log_error(spool_dir, f"spool full: dropped the {dropped} oldest events")
    return dropped


def post_events(
    url: str, api_key: str | None, project: str | None, events: list[dict[str, Any]]
) -> tuple[str, str]:
    """POST one batch; returns an ``Outcome`` and a note for the log."""
    body = json.dumps({"events": events}, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        f"{url}/v1/sessions/events", data=body, headers=headers(api_key, project), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return Outcome.SENT, str(response.status)
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace")
        if 400 <= exc.code < 500 and exc.code not in _RETRY_4XX:
            return Outcome.REFUSED, f"{exc.code} {detail}"
        return Outcome.RETRY, f"{exc.code} {detail}"
    except (OSError, ValueError) as exc:  # refused, reset, timed out, bad URL
        return Outcome.RETRY, repr(exc)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("event"), dict):
        return None
    return record


def _send(
    env: HookEnv, dest: tuple[str, str | None], batch: list[tuple[Path, dict[str, Any]]]
) -> str | None:
    """Send one batch for one destination; a note when keepmem should be
    left alone for now (the batch stays spooled), else None."""
    url, project = dest
    outcome, note = post_events(url, env.api_key, project, [e for _, e in batch])
    if outcome == Outcome.SENT:
        for path, _ in batch:
            path.unlink(missing_ok=True)
        return None
    if outcome == Outcome.RETRY:
        return note
    if len(batch) > 1:
        # One bad event refuses the whole batch: send each alone to keep the good ones.
        for item in batch:
            deferred = _send(env, dest, [item])
            if deferred is not None:
                return deferred
        return None
    path, event = batch[0]
    log_error(env.spool_dir, f"dropped refused event {event.get('kind')}: {note}")
    path.unlink(missing_ok=True)
    return None


def _drain(env: HookEnv) -> str | None:
    """Send everything spooled; a note when keepmem did not take it."""
    while True:
        enforce_cap(env.spool_dir)
        files = spooled(env.spool_dir)
        if not files:
            return None
        dest: tuple[str, str | None] | None = None
        batch: list[tuple[Path, dict[str, Any]]] = []
        for path in files:
            record = _read(path)
            if record is None:
                log_error(env.spool_dir, f"dropped unreadable spool file {path.name}")
                path.unlink(missing_ok=True)
                continue
            key = (str(record.get("url") or env.url), record.get("project"))
            if dest is None:
                dest = key
            if key == dest:
                batch.append((path, record["event"]))
            if len(batch) >= BATCH:
                break
        if dest is not None and batch:
            deferred = _send(env, dest, batch)
            if deferred is not None:
                return deferred


def _sweep_state(spool_dir: Path) -> None:
    cutoff = time.time() - STATE_DAYS * 86400
    for path in (spool_dir / "state").glob("*.json"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass


def flush(env: HookEnv, retries: int = 2, backoff: float = 1.0) -> bool:
    """Send the spool; returns True when it is empty afterwards.

    Runs only under the lock (another flusher already doing the work is
    success). Down keepmem: retried ``retries`` times with growing pauses,
    then left for the next hook's flusher."""
    attempt = 0
    while True:
        with flush_lock(env.spool_dir) as mine:
            if not mine:
                return True
            deferred = _drain(env)
            _sweep_state(env.spool_dir)
        if deferred is None and not spooled(env.spool_dir):
            return True
        if deferred is not None:
            if attempt >= retries:
                # one line per flusher, not per attempt: keepmem may be down for hours
                left = len(spooled(env.spool_dir))
                log_error(env.spool_dir, f"keepmem unreachable, {left} events kept: {deferred}")
                return False
            time.sleep(backoff * (2**attempt))
            attempt += 1
        # else: a hook spooled more after the last look but before the lock
        # was let go, and its own flusher found the lock taken: go again.
