"""The TypeScript SDK (client-ts/) for the tests that run it: its locked dev
tools installed (``npm ci``, again only when package-lock.json changed, as
``make ts-sdk`` does) and its build in client-ts/dist."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TS = ROOT / "client-ts"
# Written after a successful `npm ci`; npm ci empties node_modules first.
STAMP = TS / "node_modules" / ".installed"


def need_node() -> None:
    """Skip (the only reason to) when this machine has no Node.js and npm."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the TypeScript SDK needs Node.js 20")


def npm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", *args], cwd=TS, capture_output=True, text=True, timeout=timeout, check=False
    )


def installed() -> None:
    """client-ts/node_modules as package-lock.json pins it."""
    lock = TS / "package-lock.json"
    if STAMP.exists() and STAMP.stat().st_mtime >= lock.stat().st_mtime:
        return
    done = npm("ci", "--no-audit", "--no-fund")
    assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    STAMP.touch()


def built() -> Path:
    """The SDK built into client-ts/dist (``npm run build``); its directory."""
    need_node()
    installed()
    done = npm("run", "build")
    assert done.returncode == 0, f"npm run build failed:\n{done.stdout}\n{done.stderr}"
    return TS / "dist"
