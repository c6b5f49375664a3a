"""The worker's digest of a session's new events: an observation note, the
recurring patterns, a checkpoint when one is due (its open tasks become
keep's open commitments), and the project's resume block.

``load`` reads the inbox, ``compress`` (a model, optional, outside any
transaction) condenses it, ``apply`` stores the events as notes (through
the notes domain), writes what they say and empties the inbox in one
transaction: a crash in between loses nothing, and a second run of the same
job finds an empty inbox.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit.changes import EventKind
from app.kit.timeutil import utcnow
from app.notes import derived, reading, tagging
from app.notes import writing as notes
from app.notes.batch import MAX_BATCH, put_many
from app.providers.errors import PermanentError
from app.sessions import observe
from app.sessions import repository as repo
from app.sessions.compress import Compressed, Compressor, budget_for, events_text
from app.sessions.intake import DIGEST_PRIORITY, NOTE_KINDS, event_note, session_note_id, slug
from app.sessions.settings import SessionSettings, settings_of
from app.settings import Limits
from app.tenancy import Scope
from app.usage import service as spend

log = logging.getLogger("keepmem.sessions")

BATCH = 500  # inbox events per run; the rest are the next run's
STOP_EVERY = 20  # a Stop checkpoints once this many events came since the last
CARRIED = 30


@dataclass(slots=True)
class Loaded:
    session_id: str
    platform: str
    cwd: str
    events: list[tuple[int, dict[str, Any]]]
    state: dict[str, Any]
    checkpoint_seq: int
    next_seq: int
    settings: SessionSettings
    budget_left: int = 0
    more: bool = False

    @property
    def last_seq(self) -> int:
        return self.events[-1][0] if self.events else 0


@dataclass(slots=True)
class Outcome:
    observations: int = 0
    patterns: int = 0
    checkpoint: str | None = None
    tasks: int = 0
    notes: list[str] = field(default_factory=list)


async def load(
    session: AsyncSession, scope: Scope, *, session_id: str, server_budget: int
) -> Loaded | None:
    row = await repo.get(session, scope, session_id)
    if row is None:
        return None
    events = await repo.inbox(session, scope, session_id=session_id, limit=BATCH + 1)
    conf = await settings_of(session, scope)
    spent = await spend.spend_on(session, scope, utcnow().date(), use="sessions")
    used = (spent.tokens_in + spent.tokens_out) if spent else 0
    return Loaded(
        session_id=session_id,
        platform=row.platform,
        cwd=row.cwd,
        events=events[:BATCH],
        state=dict(row.state or {}),
        checkpoint_seq=row.checkpoint_seq,
        next_seq=row.next_seq,
        settings=conf,
        budget_left=budget_for(conf.llm_tokens_per_day, server_budget) - used,
        more=len(events) > BATCH,
    )


async def compress(loaded: Loaded, compressor: Compressor | None) -> Compressed | None:
    """The model's condensation of the events, when one is configured and
    the project's budget for the day allows the call; else None (the rules'
    digest stands alone).

    A transient failure (timeout, 429, 5xx) propagates: the job is retried
    and the inbox waits. A permanent one (bad key, unknown model, a refused
    request) would fail every retry and every later digest of the project
    alike, and the model is optional: the rules' digest goes on without it
    (the job's result says the model failed; the worker's log says why)."""
    if compressor is None or not loaded.events:
        return None
    text = events_text([ev for _, ev in loaded.events], compressor.max_input_chars)
    if not text.strip():
        return None
    if compressor.estimate(text) > loaded.budget_left:
        return Compressed.refused()
    try:
        return await compressor.compress(text)
    except PermanentError as exc:
        log.warning("session compressor %s failed: %s", compressor.name, exc)
        return Compressed.failed(f"{compressor.name}: {exc}")


def _checkpoint_due(loaded: Loaded, trigger: str | None) -> str | None:
    kinds = [ev.get("kind") for _, ev in loaded.events]
    if "post_compact" in kinds or "pre_compact" in kinds:
        return "compaction"
    if "checkpoint" in kinds:
        return "request"
    if "session_end" in kinds:
        return "end"
    if "stop" in kinds and loaded.last_seq - loaded.checkpoint_seq >= STOP_EVERY:
        return "stop"
    if trigger == "idle" and loaded.checkpoint_seq < loaded.next_seq:
        return "idle"
    return None


def _carry(state: dict[str, Any], d: observe.Digest) -> dict[str, Any]:
    """What the next run (and the next checkpoint) needs of this one."""
    out = dict(state)
    if d.todos:
        out["todos"] = d.todos
    for name, values in (
        ("prompts", d.prompts),
        ("changed", d.changed),
        ("decisions", d.decisions),
    ):
        out[name] = observe.unique([*out.get(name, []), *values])[-CARRIED:]
    if d.last_message:
        out["last_message"] = d.last_message
    if d.compact_summary:
        out["compact_summary"] = d.compact_summary
    out["errors_open"] = max(0, int(out.get("errors_open", 0)) + len(d.errors) - len(d.fixes))
    return out


async def apply(
    session: AsyncSession,
    scope: Scope,
    loaded: Loaded,
    compressed: Compressed | None,
    *,
    limits: Limits,
    trigger: str | None = None,
) -> dict[str, Any]:
    """Write what the events say and let them go (see the module's docstring)."""
    now = utcnow()
    # The call was made (and paid for) whatever became of the session since.
    if compressed is not None and not compressed.error:
        await spend.add_spend(
            session,
            scope,
            use="sessions",
            day=now.date(),
            calls=0 if compressed.was_refused else 1,
            tokens_in=compressed.tokens_in,
            tokens_out=compressed.tokens_out,
            refused=1 if compressed.was_refused else 0,
        )
    row = await repo.get(session, scope, loaded.session_id, lock=True)
    if row is None:
        return {"skipped": "session deleted"}
    events = [(s, ev) for s, ev in loaded.events if s > row.digested_seq]
    d = observe.digest([ev for _, ev in events])
    state = _carry(dict(row.state or {}), d)
    out = Outcome()
    await _store_events(session, scope, loaded.session_id, events, limits)
    if events:
        await _observation(session, scope, loaded, events, d, compressed, limits, out)
        await _patterns(session, scope, loaded, d, now, limits, out)
    processed = events[-1][0] if events else row.digested_seq
    values: dict[str, Any] = {"state": state}
    if events:
        values["digested_seq"] = events[-1][0]
    due = _checkpoint_due(loaded, trigger)
    if due is not None:
        cp = await _checkpoint(session, scope, loaded, state, d, due, now, limits, out)
        values |= {
            "checkpoints": row.checkpoints + 1,
            # What this run read: events that came in meanwhile are the next's.
            "checkpoint_seq": max(row.checkpoint_seq, processed),
            "last_checkpoint": cp,
            "summary": cp["summary"][:2000],
        }
    elif not row.summary and state.get("prompts"):
        values["summary"] = f"Working on: {state['prompts'][0][:300]}"
    await repo.update(session, scope, loaded.session_id, **_json_ready(values))
    if events:
        await repo.drop_from_inbox(
            session, scope, session_id=loaded.session_id, through=events[-1][0]
        )
    if loaded.more or row.next_seq > processed:
        # Events this run did not take (more than a batch, or sent while it
        # ran: intake saw this job taken and may have queued none, or its
        # job waits and is superseded by this one).
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.SESSION_DIGEST,
            note_id=session_note_id(loaded.session_id),
            payload={"session_id": loaded.session_id},
            priority=DIGEST_PRIORITY,
        )
    result: dict[str, Any] = {
        "events": len(events),
        "observations": out.observations,
        "patterns": out.patterns,
        "checkpoint": out.checkpoint,
        "tasks": out.tasks,
        "more": loaded.more,
    }
    if compressed is not None:
        # The failure's detail is in the worker's log: it is the operator's
        # configuration, not the tenant's.
        result["model"] = (
            "refused" if compressed.was_refused else "failed" if compressed.error else "used"
        )
    return result


async def _store_events(
    session: AsyncSession,
    scope: Scope,
    session_id: str,
    events: Sequence[tuple[int, dict[str, Any]]],
    limits: Limits,
) -> None:
    """The events worth a note, stored through the notes domain (a refused
    one, say past a quota, is logged: the digest goes on). Embedded, so a
    find reaches them; no graph extraction: the entities of raw tool output
    are noise, and the observations and checkpoints made of them get one."""
    puts = [event_note(session_id, s, ev) for s, ev in events if ev["kind"] in NOTE_KINDS]
    raw = dataclasses.replace(limits, graph_extraction=False)
    for start in range(0, len(puts), MAX_BATCH):
        stored = await put_many(session, scope, items=puts[start : start + MAX_BATCH], limits=raw)
        for item in stored:
            if item.error is not None:
                log.warning("session %s: an event note was refused: %s", session_id, item.error)


def changes_resume(result: dict[str, Any]) -> bool:
    """Whether a digest changed what the resume block shows (a checkpoint,
    its tasks, a pattern): the block is rebuilt then, not after every run."""
    return bool(result.get("checkpoint") or result.get("patterns") or result.get("tasks"))


def _json_ready(values: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v) if k in ("state", "last_checkpoint") else v for k, v in values.items()}


async def _observation(
    session: AsyncSession,
    scope: Scope,
    loaded: Loaded,
    events: Sequence[tuple[int, dict[str, Any]]],
    d: observe.Digest,
    compressed: Compressed | None,
    limits: Limits,
    out: Outcome,
) -> None:
    facts = d.facts()
    title = d.title()
    concepts: list[str] = []
    files = observe.unique([*d.changed, *d.read])
    narrative = ""
    # What the model left empty (a garbled reply leaves it all empty) is the
    # rules' to say.
    model = compressed if compressed is not None and compressed.has_content else None
    if model is not None:
        title, facts = model.title or title, model.facts or facts
        narrative, concepts = model.narrative, model.concepts
        files = observe.unique([*model.files, *files])
    if not facts and not narrative:
        return
    body = "\n".join([title, *(f"- {f}" for f in facts), *([narrative] if narrative else [])])
    tags: dict[str, Any] = {
        "session": loaded.session_id,
        "kind": "observation",
        "platform": loaded.platform,
        "source": "rules" if model is None else "llm",
    }
    if files:
        tags["file"] = files[:20]
    if concepts:
        tags["concept"] = concepts[:20]
    note_id = f"{session_note_id(loaded.session_id)}/obs/{events[0][0]:06d}"
    await notes.put(
        session,
        scope,
        data=notes.PutInput(id=note_id, content=body, summary=title[:200], tags=tags),
        limits=limits,
    )
    out.observations += 1
    out.notes.append(note_id)


def _pattern_key(kind: str, text: str) -> str:
    return hashlib.sha256(f"{kind}\0{text}".encode()).hexdigest()[:16]


async def _patterns(
    session: AsyncSession,
    scope: Scope,
    loaded: Loaded,
    d: observe.Digest,
    now: datetime,
    limits: Limits,
    out: Outcome,
) -> None:
    seen: dict[tuple[str, str], tuple[str, str, list[str], int]] = {}
    for kind, items in (("error", d.errors), ("fix", d.fixes)):
        for e in items:
            _, _, files, n = seen.get((kind, e.key), (e.template, e.example, [], 0))
            merged = observe.unique([*files, *e.files])
            seen[(kind, e.key)] = (e.template, e.example, merged, n + 1)
    # Phrase hits: low-confidence candidates, counted like the rest.
    candidates = (("decision", d.decisions), ("preference", d.preferences))
    for kind, texts in (*candidates, ("todo", d.todo_candidates)):
        for t in texts:
            seen[(kind, _pattern_key(kind, t.casefold()))] = (t, t, [], 1)
    for (kind, pattern), (tmpl, example, files, n) in seen.items():
        count = await repo.bump_pattern(
            session,
            scope,
            kind=kind,
            key=pattern,
            template=tmpl,
            example=example,
            session_id=loaded.session_id,
            files=files,
            n=n,
            at=now,
        )
        note_id = f"pattern/{kind}/{pattern}"
        label = {
            "error": "Recurring error",
            "fix": "Fixed before",
            "decision": "Decision (candidate)",
            "preference": "Preference (candidate)",
            "todo": "To do (candidate)",
        }[kind]
        await notes.put(
            session,
            scope,
            data=notes.PutInput(
                id=note_id, content=f"{label}: {tmpl}", tags={"kind": "pattern", "pattern": kind}
            ),
            limits=limits,
        )
        await tagging.tag(
            session, scope, raw_id=note_id, set_tags={"count": str(count)}, remove=["count"]
        )
        await derived.announce(session, scope, note_id=note_id, kind=EventKind.PATTERN)
        out.patterns += 1


def checkpoint_text(cp: dict[str, Any]) -> str:
    lines = [f"Checkpoint ({cp['trigger']}) of session {cp['session_id']}, {cp['at']}"]
    lines.append(cp["summary"])
    if cp["decisions"]:
        lines += ["Decisions:", *(f"- {x}" for x in cp["decisions"])]
    if cp.get("candidates"):
        lines += ["Possibly decided (from the conversation's words, unconfirmed):"]
        lines += [f"- {x}" for x in cp["candidates"]]
    if cp["open_tasks"]:
        lines += ["Open tasks:", *(f"- {x}" for x in cp["open_tasks"])]
    if cp["files"]:
        lines.append("Files changed: " + ", ".join(cp["files"]))
    return "\n".join(lines)


async def _checkpoint(
    session: AsyncSession,
    scope: Scope,
    loaded: Loaded,
    state: dict[str, Any],
    d: observe.Digest,
    trigger: str,
    now: datetime,
    limits: Limits,
    out: Outcome,
) -> dict[str, Any]:
    summary_src = str(state.get("compact_summary") or "")
    carried = observe.Digest(todos=dict(state.get("todos") or {}), compact_summary=summary_src)
    tasks = observe.open_tasks(carried)
    # The host's own summary states decisions; phrases in the conversation
    # only suggest them (candidates, shown apart and never in the resume block).
    decisions = observe.decisions_in(summary_src)[:20]
    candidates = [
        x for x in observe.unique([*d.decisions, *state.get("decisions", [])]) if x not in decisions
    ][:20]
    if summary_src:
        summary = summary_src[:3000]
    else:
        bits = []
        if state.get("prompts"):
            bits.append(f"Working on: {state['prompts'][-1][:300]}")
        if state.get("changed"):
            bits.append("Changed: " + ", ".join(state["changed"][-10:]))
        if state.get("errors_open"):
            bits.append(f"Unresolved failures: {state['errors_open']}")
        if state.get("last_message"):
            bits.append(f"Last reply: {state['last_message'][:400]}")
        summary = "\n".join(bits) or "No activity worth keeping."
    cp = {
        "session_id": loaded.session_id,
        "platform": loaded.platform,
        "cwd": loaded.cwd,
        "at": now.isoformat(),
        "trigger": trigger,
        "summary": summary,
        "decisions": decisions,
        "candidates": candidates,
        "open_tasks": tasks[:30],
        "files": list(state.get("changed", []))[-15:],
    }
    note_id = f"{session_note_id(loaded.session_id)}/checkpoint/{now:%Y%m%dT%H%M%S%f}"
    text = checkpoint_text(cp)
    await notes.put(
        session,
        scope,
        data=notes.PutInput(
            id=note_id,
            content=text,
            summary=text[: limits.max_summary_chars],
            tags={"session": loaded.session_id, "kind": "checkpoint", "trigger": trigger},
        ),
        limits=limits,
    )
    await derived.announce(session, scope, note_id=note_id, kind=EventKind.CHECKPOINT)
    if trigger == "compaction":
        await derived.announce(session, scope, note_id=note_id, kind=EventKind.COMPACTION)
    for task in tasks[:30]:
        await _task(session, scope, loaded, task, "open", limits)
    for task in observe.done_tasks(carried):
        await _task(session, scope, loaded, task, "fulfilled", limits, only_existing=True)
    out.tasks = len(tasks)
    out.checkpoint = note_id
    out.notes.append(note_id)
    return cp


async def _task(
    session: AsyncSession,
    scope: Scope,
    loaded: Loaded,
    task: str,
    status: str,
    limits: Limits,
    *,
    only_existing: bool = False,
) -> None:
    """A task as keep's commitment (``act=commitment``, ``status``): one note
    per task text in the project, whichever session names it."""
    note_id = f"task/{observe.task_key(task)}"
    if not await reading.exists(session, scope, note_id=note_id):
        if only_existing:
            return
        await notes.put(
            session,
            scope,
            data=notes.PutInput(
                id=note_id,
                content=task,
                tags={"act": "commitment", "source": "session", "session": loaded.session_id},
            ),
            limits=limits,
        )
    await tagging.tag(
        session, scope, raw_id=note_id, set_tags={"status": status}, remove=["status"]
    )


__all__ = ["Loaded", "apply", "compress", "load", "slug"]
