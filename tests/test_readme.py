"""The README opens with exactly the two commands, and CI runs the second."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_opens_with_run_and_test_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```\w*\n(.*?)```", text, re.S)
    assert first_block is not None
    assert text.index("```") < text.index("## ")  # before any section
    lines = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2
    assert lines == ["make up", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert "keepmem up" in makefile and "pytest" in makefile
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == [lines[1]]  # CI runs exactly the README's test command


def test_the_house_map_names_every_package_and_module_of_app() -> None:
    """The development section's map lists every package and top-level
    module of app/ (a new room is drawn on the map the day it is built)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Development") :]
    app = ROOT / "app"
    rooms = {f"`{p.name}/`" for p in app.iterdir() if (p / "__init__.py").exists()}
    rooms |= {f"`{p.name}`" for p in app.glob("*.py") if p.name != "__init__.py"}
    assert len(rooms) > 30
    assert {room for room in rooms if room not in section} == set()
