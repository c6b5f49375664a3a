"""Helpers every notes use case shares: id validation, tag errors, hashes."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from app.errors import BadRequest
from app.kit import tags as tagrules
from app.kit.ids import InvalidId, normalize_id


def valid_id(raw: str, what: str = "id") -> str:
    """A normalised note id, or 400."""
    try:
        return normalize_id(raw)
    except InvalidId as exc:
        raise BadRequest(f"invalid {what}: {exc}") from exc


def tag_error(exc: ValueError) -> BadRequest:
    return BadRequest(f"invalid tags: {exc}")


def sha256_hex(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def tag_words(note_id: str, tags: Mapping[str, Any]) -> str:
    words = [] if note_id.startswith("%") else [note_id]
    for key, value in tags.items():
        if not key.startswith("_"):
            words.extend(tagrules.values_of(value, key))
    return " ".join(words)


PENDING_TAG = "_pending_document"
