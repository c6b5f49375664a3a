"""`keepmem up` as a subprocess, for the tests that run the whole stack as a
user does: started in a clean environment, its printed exports read within a
deadline that holds even when it prints nothing, its log kept in a file (a
pipe nobody reads fills and stalls the stack), and stopped by a signal."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.cli.embedded import free_port

CLI = [sys.executable, "-c", "from app.cli import main; main()"]


def clean_env() -> dict[str, str]:
    """This process's environment without any ``KEEPMEM_`` setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}


@dataclass
class Stack:
    proc: subprocess.Popen[str]
    port: int
    exports: dict[str, str]
    hint: str  # the line that tells keep's CLI where to go
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def key(self) -> str:
        """The key printed on first start ("" on a warm restart)."""
        return self.exports.get("KEEPMEM_API_KEY", "")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 90) -> str:
        """Stop it with ``sig`` (killed if still running after ``timeout``
        seconds); its log."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.log.read_text()


def start(
    data_dir: Path,
    *options: str,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    wait: float = 180,
) -> Stack:
    """``keepmem up --data-dir data_dir --port <free> *options`` with
    ``env`` added to a clean environment; returns once it has printed its
    exports (the stack is serving)."""
    port = free_port()
    log = log or data_dir.with_name(data_dir.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*CLI, "up", "--data-dir", str(data_dir), "--port", str(port), *options],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**clean_env(), **(env or {})},
        )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read, args=(proc, lines), daemon=True).start()
    exports: dict[str, str] = {}
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            proc.wait(timeout=60)
            raise AssertionError(f"keepmem up exited: {log.read_text()[-3000:]}")
        if m := re.match(r"export (KEEPMEM_\w+)=(\S+)$", line.strip()):
            exports[m.group(1)] = m.group(2)
        if line.startswith("# for the keep CLI"):
            return Stack(proc, port, exports, line, log)
    proc.kill()
    proc.wait()
    raise AssertionError(f"keepmem up did not start in {wait} s: {log.read_text()[-3000:]}")


def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Every line the stack prints, then None (it closed its output)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)
