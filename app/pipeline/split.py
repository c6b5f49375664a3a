"""Split a note's text into parts for analysis: sections, then paragraphs,
then sentences, packed greedily up to a target size."""

from __future__ import annotations

import re

from app.providers.summarization.local import sentences

_HEADING = re.compile(r"^#{1,6}\s", re.M)


def _pieces(text: str, target: int) -> list[str]:
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if len(block) <= target:
            out.append(block)
            continue
        out.extend(
            sentences(block) or [block[i : i + target] for i in range(0, len(block), target)]
        )
    return out


def split_parts(text: str, *, target_chars: int) -> list[str]:
    """Parts of roughly ``target_chars`` each; a heading always starts a new part."""
    sections = [s for s in re.split(r"(?=^#{1,6}\s)", text, flags=re.M) if s.strip()]
    parts: list[str] = []
    for section in sections:
        current = ""
        for piece in _pieces(section, target_chars):
            starts_section = bool(_HEADING.match(piece))
            if current and (starts_section or len(current) + len(piece) + 2 > target_chars):
                parts.append(current)
                current = ""
            current = f"{current}\n\n{piece}" if current else piece
        if current:
            parts.append(current)
    # Fold a runt into its neighbour.
    if len(parts) > 1 and len(parts[-1]) < target_chars // 4:
        tail = parts.pop()
        parts[-1] = f"{parts[-1]}\n\n{tail}"
    return parts
