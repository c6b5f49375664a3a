"""What the production image's runtime virtualenv weighs, by distribution.

Builds the image's two stages here, as CI does (deploy/wheels.sh, then the
wheels' install.sh into a clean virtualenv), unless a virtualenv is given,
and prints its size on disk and the largest installed distributions (each
one's files as its RECORD lists them, bytecode included).

    .venv/bin/python bench/image_size.py            # build, then measure
    .venv/bin/python bench/image_size.py /opt/keepmem   # measure a venv
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = 15


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _by_distribution(venv: Path) -> list[tuple[int, str]]:
    site = next(venv.glob("lib/python*/site-packages"))
    sizes = []
    for record in site.glob("*.dist-info/RECORD"):
        total = 0
        for line in record.read_text().splitlines():
            path = (site / line.rsplit(",", 2)[0]).resolve()
            if path.is_file():
                total += path.stat().st_size
        name = record.parent.name.removesuffix(".dist-info")
        sizes.append((total, name))
    return sorted(sizes, reverse=True)


def _build(into: Path) -> Path:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    wheels, venv = into / "wheels", into / "runtime"
    subprocess.run(["sh", "deploy/wheels.sh", str(wheels)], cwd=ROOT, env=env, check=True)
    subprocess.run(["sh", str(wheels / "install.sh"), str(wheels), str(venv)], env=env, check=True)
    return venv


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(sys.argv[1]) if len(sys.argv) > 1 else _build(Path(tmp))
        total = _du(venv)
        print(f"runtime virtualenv: {total / 2**20:.0f} MiB")
        for size, name in _by_distribution(venv)[:TOP]:
            print(f"  {size / 2**20:6.1f} MiB  {name}")


if __name__ == "__main__":
    main()
