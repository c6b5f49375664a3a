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
