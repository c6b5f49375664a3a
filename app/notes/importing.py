"""Importing keep-export documents (``POST /v1/import``): each note with its
history and parts, its own timestamps and tags, as the notes domain writes
any note (change feed, tag edges, embedding queued).

``merge`` keeps notes that already exist (counted as skipped); ``replace``
deletes them first, history included. An imported note has no full text, only
its summary, which becomes what is indexed and embedded.

A note's current tags obey the project's tag rules (``tag_policy``). The
import's ``.tag/`` notes are written first, so an export's rules (and the
values of its constrained tags) hold for its notes; a ``.tag/<key>`` note's
own rule flags are checked as a put checks them. Versions keep their tags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, PayloadTooLarge
from app.kit import tags as tagrules
from app.kit.ids import is_part_id, is_system_id
from app.kit.timeutil import parse_timestamp, utcnow
from app.notes import history, tag_policy
from app.notes import repository as repo
from app.notes.common import sha256_hex, tag_error, tag_words, valid_id
from app.notes.repository import changes as feed
from app.notes.views import split_system
from app.notes.writing import after_insert
from app.settings import Limits
from app.tenancy import Scope

MODES = ("merge", "replace")
# Tags keep computes from timestamps on the way out: not stored.
_COMPUTED = {"_created", "_updated", "_updated_date", "_accessed", "_accessed_date"}
MAX_DOCUMENTS = 100_000
# Version and part numbers are PostgreSQL integers, and a part is read as
# ``ID@P{N}`` with N from 1.
MAX_NUMBER = 2**31 - 1


@dataclass(slots=True)
class ImportResult:
    imported: int = 0
    versions: int = 0
    parts: int = 0
    skipped: int = 0
    queued: int = 0


def _when(value: Any, fallback: Any) -> Any:
    if isinstance(value, str) and value.strip():
        try:
            return parse_timestamp(value)
        except ValueError as exc:
            raise BadRequest(f"invalid timestamp {value[:40]!r} in import: {exc}") from exc
    return fallback


def _tags(raw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user tags checked by keep's rules, stored system tags)."""
    if raw is None:
        return {}, {}
    if not isinstance(raw, Mapping):
        raise BadRequest("document tags must be an object")
    user, system = split_system(dict(raw))
    try:
        checked = tagrules.apply_changes({}, add=tagrules.user_tag_changes(user)[1])
    except tagrules.InvalidTags as exc:
        raise tag_error(exc) from exc
    return checked, {k: v for k, v in system.items() if k not in _COMPUTED}


def _number(value: Any, where: str) -> int:
    """A version or part number: a JSON integer from 1 to :data:`MAX_NUMBER`."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NUMBER:
        raise BadRequest(f"{where} must be an integer from 1 to {MAX_NUMBER}, not {value!r:.40}")
    return value


def _entries(raw: Any, where: str) -> list[Mapping[str, Any]]:
    """A document's ``versions`` or ``parts``: absent, or a list of objects."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest(f"{where} must be a list")
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise BadRequest(f"{where}[{i}] must be an object")
    return raw


def _numbered(entries: list[Mapping[str, Any]], key: str, where: str) -> list[int]:
    """The numbers ``entries`` give under ``key`` (their place, from 1, when
    left out), each valid and none twice."""
    numbers: list[int] = []
    for i, entry in enumerate(entries):
        given = entry.get(key)
        numbers.append(i + 1 if given is None else _number(given, f"{where}[{i}].{key}"))
    if len(set(numbers)) < len(numbers):
        twice = next(n for n in numbers if numbers.count(n) > 1)
        raise BadRequest(f"{where}: {key} {twice} appears more than once")
    return numbers


def _tag_doc(doc: Any) -> bool:
    return isinstance(doc, Mapping) and _text(doc, "id").startswith(tag_policy.PREFIX)


def _text(doc: Mapping[str, Any], key: str) -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else ""


async def import_documents(
    session: AsyncSession,
    scope: Scope,
    *,
    documents: Sequence[Any],
    mode: str,
    limits: Limits,
) -> ImportResult:
    if mode not in MODES:
        raise BadRequest(f"mode must be one of {', '.join(MODES)}")
    if len(documents) > MAX_DOCUMENTS:
        raise PayloadTooLarge(f"at most {MAX_DOCUMENTS} documents per import; split the file")
    result = ImportResult()
    for index in sorted(range(len(documents)), key=lambda i: not _tag_doc(documents[i])):
        doc = documents[index]
        if not isinstance(doc, Mapping):
            raise BadRequest(f"documents[{index}] must be an object")
        note_id = valid_id(_text(doc, "id"), f"documents[{index}].id")
        if is_part_id(note_id):
            raise BadRequest(f"documents[{index}]: {note_id!r} is a part id")
        if await repo.get(session, scope, note_id) is not None:
            if mode == "merge":
                result.skipped += 1
                continue
            # the note exists (just read): delete it with its history
            await history.delete(session, scope, raw_id=note_id, delete_versions=True)
        await _import_one(
            session, scope, note_id, doc, result, limits=limits, where=f"documents[{index}]"
        )
    return result


async def _import_one(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    doc: Mapping[str, Any],
    result: ImportResult,
    *,
    limits: Limits,
    where: str,
) -> None:
    # Checked before anything is written (a refusal also rolls the whole
    # import back: the request's unit of work never commits).
    versions = _entries(doc.get("versions"), f"{where}.versions")
    version_numbers = _numbered(versions, "version", f"{where}.versions")
    parts = _entries(doc.get("parts"), f"{where}.parts")
    part_numbers = _numbered(parts, "part_num", f"{where}.parts")
    now = utcnow()
    summary = (_text(doc, "summary") or _text(doc, "content"))[: limits.max_summary_chars]
    user, system = _tags(doc.get("tags"))
    tag_policy.check_stored_flags(note_id, system, {})
    await tag_policy.admit(
        session,
        scope,
        adds={k: tagrules.values_of(v, k) for k, v in user.items()},
        existing={},
    )
    created = _when(doc.get("created_at"), now)
    content_hash = _text(doc, "content_hash_full") or sha256_hex(summary)
    system_note = is_system_id(note_id)
    stored = {**system, **user, "_summarized_hash": content_hash[:10]}
    await repo.insert_note(
        session,
        scope,
        note_id=note_id,
        values={
            "summary": summary,
            "tags": stored,
            "tag_index": tagrules.index_terms(user),
            "content_hash": content_hash,
            "created_at": created,
            "updated_at": _when(doc.get("updated_at"), created),
            "accessed_at": _when(doc.get("accessed_at"), now),
            "pending_content": None if system_note else summary,
        },
        fts_text=summary[: limits.max_fts_chars],
        tag_text=tag_words(note_id, user),
    )
    queued = await after_insert(
        session,
        scope,
        note_id=note_id,
        user_tags=user,
        system_note=system_note,
        needs_summary=False,
        content_hash=content_hash,
        limits=limits,
    )
    result.imported += 1
    result.queued += 1 if queued else 0
    result.versions += await _import_versions(
        session,
        scope,
        note_id,
        sorted(zip(version_numbers, versions, strict=True), key=lambda pair: pair[0]),
    )
    result.parts += await _import_parts(
        session, scope, note_id, list(zip(part_numbers, parts, strict=True))
    )


async def _import_versions(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    numbered: list[tuple[int, Mapping[str, Any]]],
) -> int:
    """The versions in their numbers' order, stored as 1..n (oldest first)."""
    ordered = [version for _, version in numbered]
    for number, version in enumerate(ordered, start=1):
        summary = _text(version, "summary")
        user, system = _tags(version.get("tags"))
        created = _when(version.get("created_at"), utcnow())
        await repo.insert_version_text(
            session,
            scope,
            note_id,
            values={
                "version": number,
                "summary": summary,
                "tags": {**system, **user},
                "content_hash": _text(version, "content_hash") or sha256_hex(summary),
                "created_at": created,
                "updated_at": _when(version.get("updated_at"), created),
                "fts_text": summary,
                "tag_text": tag_words(note_id, user),
            },
        )
    if ordered:
        await feed.record(
            session,
            scope,
            mutation="version_insert",
            entity_id=note_id,
            kind=None,
            payload={"versions": len(ordered)},
        )
    return len(ordered)


async def _import_parts(
    session: AsyncSession,
    scope: Scope,
    note_id: str,
    numbered: list[tuple[int, Mapping[str, Any]]],
) -> int:
    rows: list[tuple[int, str, dict[str, Any], str, str]] = []
    for num, part in numbered:
        summary = _text(part, "summary")
        tags = part.get("tags") if isinstance(part.get("tags"), Mapping) else {}
        rows.append((num, summary, dict(tags or {}), sha256_hex(summary), summary))
    if rows:
        await repo.insert_parts(session, scope, note_id, rows)
        await feed.record(
            session,
            scope,
            mutation="part_insert",
            entity_id=note_id,
            kind=None,
            payload={"parts": len(rows)},
        )
    return len(rows)
