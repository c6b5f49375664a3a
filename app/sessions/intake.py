"""Event intake: the only thing a hook's call waits for.

A batch is cleaned, numbered per session and put in the session's inbox;
a digest job is queued in the same transaction unless one is already
waiting. Nothing else runs here: the worker's digest stores the events as
notes through the notes domain (so find, versions, tags, export, the change
feed and SSE see every event) and makes observations, patterns,
checkpoints and the resume block.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, OutsideScope
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction
from app.kit.timeutil import parse_timestamp, utcnow
from app.notes.writing import PutInput
from app.sessions import cleaning, observe
from app.sessions import repository as repo
from app.sessions.schemas import EventIn, IntakeOut, SessionState
from app.sessions.settings import SessionSettings
from app.tenancy import Scope

# Events kept as notes; the others only count, or feed the digest.
NOTE_KINDS = {"prompt", "tool_result", "tool_failure", "stop", "post_compact", "subagent_stop"}
OFF, ON = "[keepmem:off]", "[keepmem:on]"
DIGEST_PRIORITY = 8
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")


def whole_project(scope: Scope) -> None:
    """Sessions belong to a project, not to a tag: a tag-scoped key sees none."""
    if scope.tag_terms:
        raise OutsideScope("sessions need a key without a tag scope")


def slug(session_id: str) -> str:
    """The session id as it appears in note ids."""
    if _SAFE_ID.match(session_id):
        return session_id
    return "h" + hashlib.sha256(session_id.encode()).hexdigest()[:20]


def session_note_id(session_id: str) -> str:
    return f"session/{slug(session_id)}"


def _toggle(events: Sequence[EventIn]) -> bool | None:
    """The last opt-out or opt-in a prompt of the batch asks for."""
    out = None
    for ev in events:
        if ev.kind == "prompt" and ev.prompt:
            low = ev.prompt.casefold()
            if OFF in low:
                out = False
            elif ON in low:
                out = True
    return out


def _noise(ev: EventIn) -> bool:
    """Lifecycle noise: announcements before a tool runs (its result says
    it all), notifications, and results with nothing in them."""
    if ev.kind in ("tool_use", "notification", "subagent_start"):
        return True
    if (
        ev.kind == "prompt"
        and ev.prompt
        and (OFF in ev.prompt.casefold() or ON in ev.prompt.casefold())
    ):
        return True
    if ev.kind == "tool_result" and ev.tool_output in (None, "", {}, []) and not ev.error:
        tool = (ev.tool_name or "").lower()
        return tool not in observe.CHANGE_TOOLS and tool not in observe.TODO_TOOLS
    return False


def _when(ev: EventIn, now: datetime) -> datetime:
    if ev.at is not None:
        # Checked before anything is written (``_check_times``).
        return min(parse_timestamp(ev.at), now)  # a clock ahead of ours reorders nothing
    return now


def _check_times(events: Sequence[EventIn]) -> None:
    """A 400 naming the first event whose time cannot be read: nothing stored."""
    for i, ev in enumerate(events):
        if ev.at is not None:
            try:
                parse_timestamp(ev.at)
            except ValueError as exc:
                raise BadRequest(f"events[{i}].at: {exc}") from exc


def _tags(ev: Mapping[str, Any], session_id: str) -> dict[str, Any]:
    tags: dict[str, Any] = {
        "session": session_id,
        "event": ev["kind"],
        "platform": ev["platform"],
    }
    if ev.get("tool_name"):
        tags["tool"] = str(ev["tool_name"])[:200]
    if ev.get("original_chars"):
        # The output was cut to a preview: how big it was.
        tags["output_chars"] = str(ev["original_chars"])
        tags["output_lines"] = str(ev.get("original_lines", ""))
    files = observe.paths_in(ev.get("tool_input"))[:20]
    if files:
        tags["file"] = [f[:500] for f in files]
    return tags


async def intake(
    session: AsyncSession, scope: Scope, *, events: Sequence[EventIn], conf: SessionSettings
) -> IntakeOut:
    """Store a batch of hook events (see the module's docstring); ``conf``
    is the project's session settings (capture, excludes)."""
    whole_project(scope)
    _check_times(events)
    now = utcnow()
    by_session: dict[str, list[EventIn]] = {}
    for ev in events:
        by_session.setdefault(ev.session_id, []).append(ev)
    accepted = dropped = 0
    states = []
    for session_id, group in by_session.items():
        kept = [ev for ev in group if not _noise(ev)]
        ended = next(
            (
                (_when(e, now), redaction.clean(e.reason or "ended"))
                for e in group
                if e.kind == "session_end"
            ),
            None,
        )
        counts: dict[str, int] = {}
        cleaned = []
        for ev in kept:
            counts[ev.kind] = counts.get(ev.kind, 0) + 1
            clean = cleaning.clean_event(ev.model_dump(exclude_none=True), excludes=conf.excludes)
            clean["at"] = _when(ev, now).isoformat()
            cleaned.append(clean)
        times = [_when(e, now) for e in group]
        row = await repo.record_events(
            session,
            scope,
            session_id=session_id,
            platform=group[0].platform,
            cwd=redaction.clean(next((e.cwd for e in group if e.cwd), "") or ""),
            first_at=min(times),
            last_at=max(times),
            events=cleaned,
            counts=counts,
            toggle=_toggle(group),
            project_capture=conf.capture,
            ended=ended,
            job_note=session_note_id(session_id),
        )
        states.append(SessionState(session_id=session_id, capture=bool(row.capture)))
        if not row.stored:
            dropped += len(group)
            continue
        dropped += len(group) - len(kept)
        accepted += len(kept)
        if kept and not row.digest_waiting:
            await _queue_digest(session, scope, session_id)
    return IntakeOut(accepted=accepted, dropped=dropped, sessions=states)


async def record_request(
    session: AsyncSession, scope: Scope, *, current: Any, note: str | None
) -> None:
    """A checkpoint asked for through the API: one more event for the digest
    (whatever the project's capture setting: it was asked for)."""
    now = utcnow()
    event: dict[str, Any] = {
        "kind": "checkpoint",
        "platform": current.platform,
        "at": now.isoformat(),
    }
    if note:
        event["message"] = cleaning.clean_event({"message": note}, excludes=())["message"]
    row = await repo.record_events(
        session,
        scope,
        session_id=current.session_id,
        platform=current.platform,
        cwd=current.cwd,
        first_at=now,
        last_at=now,
        events=[event],
        counts={"checkpoint": 1},
        toggle=None,
        project_capture=True,
        ended=None,
        job_note=session_note_id(current.session_id),
    )
    if row.stored and not row.digest_waiting:
        await _queue_digest(session, scope, current.session_id)


async def _queue_digest(session: AsyncSession, scope: Scope, session_id: str) -> None:
    """A digest for the session (the caller saw none waiting; one that
    races in is harmless: a digest of an empty inbox does nothing)."""
    note_id = session_note_id(session_id)
    await jobs.enqueue(
        session,
        scope,
        kind=JobKind.SESSION_DIGEST,
        note_id=note_id,
        payload={"session_id": session_id},
        priority=DIGEST_PRIORITY,
        supersede=False,
    )


def event_note(session_id: str, seq: int, event: Mapping[str, Any]) -> PutInput:
    """The note an event is stored as."""
    content, summary = cleaning.render(event)
    return PutInput(
        id=f"{session_note_id(session_id)}/{seq:06d}",
        content=content,
        summary=summary,
        tags=_tags(event, session_id),
        created_at=str(event["at"]),
    )


__all__ = ["intake", "session_note_id", "slug", "whole_project"]
