"""What the notes service hands back: plain values, not ORM rows or wire schemas."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from app.kit.tags import SYSTEM_PREFIX
from app.kit.timeutil import keep_date, keep_ts
from app.models import Note, NoteVersion, Part


@dataclass(slots=True)
class ItemView:
    id: str
    summary: str
    tags: dict[str, Any]
    created_at: str
    updated_at: str
    changed: bool | None = None
    pending: list[str] = field(default_factory=list)
    #: A passage's characters in its note's text, and the pages (slides,
    #: sheet, cue times) they cover.
    span: tuple[int, int] | None = None
    locator: dict[str, Any] | None = None


def _timestamps(created: datetime, updated: datetime, accessed: datetime | None) -> dict[str, str]:
    out = {
        "_created": keep_ts(created),
        "_updated": keep_ts(updated),
        "_updated_date": keep_date(updated),
    }
    if accessed is not None:
        out["_accessed"] = keep_ts(accessed)
        out["_accessed_date"] = keep_date(accessed)
    return out


class Shown(Protocol):
    """What a note's view reads of it (a Note, or a row find read for its page)."""

    @property
    def id(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def tags(self) -> dict[str, Any]: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def accessed_at(self) -> datetime: ...


def note_view(
    note: Note | Shown, *, changed: bool | None = None, pending: list[str] | None = None
) -> ItemView:
    tags = dict(note.tags)
    tags.update(_timestamps(note.created_at, note.updated_at, note.accessed_at))
    return ItemView(
        id=note.id,
        summary=note.summary,
        tags=tags,
        created_at=tags["_created"],
        updated_at=tags["_updated"],
        changed=changed,
        pending=sorted(pending or []),
    )


def version_view(note_id: str, offset: int, version: NoteVersion) -> ItemView:
    tags = dict(version.tags)
    tags.update(_timestamps(version.created_at, version.updated_at, None))
    tags["_version"] = str(offset)
    tags["_base_id"] = note_id
    return ItemView(
        id=f"{note_id}@V{{{offset}}}",
        summary=version.summary,
        tags=tags,
        created_at=tags["_created"],
        updated_at=tags["_updated"],
    )


def part_view(note_id: str, part: Part) -> ItemView:
    tags = {k: v for k, v in part.tags.items()}
    tags["_base_id"] = note_id
    tags["_part_num"] = str(part.part_num)
    created = keep_ts(part.created_at)
    tags.setdefault("_created", created)
    span = None
    if part.span_start is not None and part.span_end is not None:
        span = (part.span_start, part.span_end)
        tags["_span_start"], tags["_span_end"] = str(span[0]), str(span[1])
        for key, value in (part.locator or {}).items():
            tags[f"_{key}"] = str(value)
    return ItemView(
        id=f"{note_id}@P{{{part.part_num}}}",
        summary=part.summary,
        tags=tags,
        created_at=created,
        updated_at=created,
        span=span,
        locator=dict(part.locator or {}) if span else None,
    )


def split_system(tags: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user tags, stored system tags)."""
    user = {k: v for k, v in tags.items() if not k.startswith(SYSTEM_PREFIX)}
    system = {k: v for k, v in tags.items() if k.startswith(SYSTEM_PREFIX)}
    return user, system
