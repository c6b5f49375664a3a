"""Message intake: a batch of a thread's messages becomes notes (through the
notes domain: sanitised, versioned, findable) and, unless ``infer`` is
false, waits in the thread's inbox for one extraction job. A job already
waiting for the thread takes the batch along (batching per thread: one
model call for a burst of batches)."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, Conflict, OutsideScope, PayloadTooLarge
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import redaction
from app.kit.timeutil import parse_timestamp, utcnow
from app.memories import repository as repo
from app.memories.schemas import IntakeOut, MessageBatch, MessageIn
from app.notes.batch import put_many
from app.notes.writing import PutInput
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants

EXTRACT_PRIORITY = 8
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")


def whole_project(scope: Scope) -> None:
    """Threads and memories belong to a project, not to a tag: a tag-scoped
    key sees none (its finds still reach the notes its tags allow)."""
    if scope.tag_terms:
        raise OutsideScope("threads and memories need a key without a tag scope")


def slug(thread_id: str) -> str:
    """The thread id as it appears in note ids."""
    if _SAFE_ID.match(thread_id):
        return thread_id
    return "h" + hashlib.sha256(thread_id.encode()).hexdigest()[:20]


def thread_note_id(thread_id: str) -> str:
    return f"thread/{slug(thread_id)}"


def message_note_id(thread_id: str, seq: int) -> str:
    return f"{thread_note_id(thread_id)}/{seq:06d}"


def speaker_of(message: MessageIn, user_id: str, agent_id: str) -> str:
    if message.name:
        return " ".join(message.name.split())
    if message.role == "user" and user_id:
        return user_id
    if message.role == "assistant" and agent_id:
        return agent_id
    return message.role


def _times(messages: list[MessageIn]) -> list[datetime]:
    """Each message's time; those without one arrive now, a microsecond
    apart so the batch keeps its order."""
    now = utcnow()
    out = []
    for i, m in enumerate(messages):
        if m.time is None:
            out.append(now + timedelta(microseconds=i))
            continue
        try:
            out.append(parse_timestamp(m.time))
        except ValueError as exc:
            raise BadRequest(
                f"message {i}: invalid time {m.time[:80]!r}: use ISO-8601 ({exc})"
            ) from exc
    return out


async def add_messages(
    session: AsyncSession, scope: Scope, *, thread_id: str, batch: MessageBatch, limits: Limits
) -> IntakeOut:
    """Store a batch of messages and queue its extraction; a refused message
    refuses the batch, and nothing of it is stored."""
    whole_project(scope)
    for i, m in enumerate(batch.messages):
        if len(m.content) > limits.max_content_chars:
            raise PayloadTooLarge(
                f"message {i} is {len(m.content)} characters; "
                f"the limit is {limits.max_content_chars}"
            )
        if not m.content.strip():
            raise BadRequest(f"message {i} is empty")
    times = _times(batch.messages)
    row = await repo.record_batch(
        session,
        scope,
        thread_id=thread_id,
        user_id=batch.user_id or "",
        agent_id=batch.agent_id or "",
        first_at=min(times),
        last_at=max(times),
        count=len(batch.messages),
        job_note=thread_note_id(thread_id),
    )
    user_id, agent_id, first = str(row.user_id), str(row.agent_id), int(row.first_seq)
    for name, asked, held in (
        ("user_id", batch.user_id, user_id),
        ("agent_id", batch.agent_id, agent_id),
    ):
        if asked and asked != held:
            # Raising undoes the transaction: nothing of the batch is stored.
            raise Conflict(f"thread {thread_id!r} belongs to {name} {held!r}, not {asked!r}")
    puts: list[PutInput] = []
    inbox: list[dict[str, Any]] = []
    for i, (m, at) in enumerate(zip(batch.messages, times, strict=True)):
        seq = first + i
        note_id = message_note_id(thread_id, seq)
        speaker = speaker_of(m, user_id, agent_id)
        tags: dict[str, Any] = {**(m.tags or {})}
        tags |= {"thread": thread_id, "role": m.role, "speaker": speaker}
        if seq > 0:
            tags["in-reply-to"] = message_note_id(thread_id, seq - 1)
        if user_id:
            tags["user"] = user_id
        if agent_id:
            tags["agent"] = agent_id
        content = f"{m.name}: {m.content}" if m.name else m.content
        puts.append(PutInput(id=note_id, content=content, tags=tags, created_at=at.isoformat()))
        inbox.append(
            {
                "seq": seq,
                "id": note_id,
                "role": m.role,
                "speaker": speaker,
                "named": m.name is not None,
                "text": m.content,
                "at": at.isoformat(),
                "user": user_id,
                "agent": agent_id,
            }
        )
    stored = await put_many(session, scope, items=puts, limits=limits)
    refused = [(i, item) for i, item in enumerate(stored) if item.view is None]
    if refused:
        i, item = refused[0]
        # Raising undoes the transaction: the batch is stored whole or not at all.
        raise BadRequest(f"message {i}: {item.error}")
    if not batch.infer:
        return IntakeOut(thread_id=thread_id, messages=[p.id or "" for p in puts], extraction="off")
    if await tenants.sanitizing(session, scope):
        for m_ in inbox:
            m_["text"] = redaction.clean(m_["text"])
    await repo.add_to_inbox(session, scope, thread_id=thread_id, messages=inbox)
    if not row.extraction_waiting:
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.MEMORY_EXTRACT,
            note_id=thread_note_id(thread_id),
            payload={"thread_id": thread_id},
            priority=EXTRACT_PRIORITY,
            supersede=False,
        )
    return IntakeOut(
        thread_id=thread_id,
        messages=[p.id or "" for p in puts],
        extraction="joined" if row.extraction_waiting else "queued",
    )
