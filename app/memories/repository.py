"""All SQL of the memories domain (tables of migration 0017): threads, the
extraction inbox, and the slot locks of reconciliation (model spend is
counted by ``app.usage``).
Every statement filters on the scope's tenant and project; row-level
security backs it up. Messages and memories are notes (the notes domain's)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.tenancy import Scope

_MINE = "tenant_id = :t AND project_id = :p"
_THREAD = (
    "id, user_id, agent_id, created_at, last_message_at, next_seq, extracted_seq, memories_made"
)


def _of(scope: Scope, **params: Any) -> dict[str, Any]:
    return {"t": scope.tenant_id, "p": scope.project_id, **params}


# The thread row (made or updated, and locked to the end of the
# transaction): its next message number moves past the batch; and whether
# an extraction job is queued and not yet taken (it will read this batch).
_RECORD = text(
    """
    WITH up AS (
        INSERT INTO memory_threads AS th
            (tenant_id, project_id, id, user_id, agent_id, created_at, last_message_at, next_seq)
        VALUES (:t, :p, :tid, :uid, :aid, :first, :last, :n)
        ON CONFLICT (tenant_id, project_id, id) DO UPDATE SET
            user_id = CASE WHEN th.user_id = '' THEN EXCLUDED.user_id ELSE th.user_id END,
            agent_id = CASE WHEN th.agent_id = '' THEN EXCLUDED.agent_id ELSE th.agent_id END,
            last_message_at = greatest(th.last_message_at, EXCLUDED.last_message_at),
            next_seq = th.next_seq + :n
        RETURNING user_id, agent_id, next_seq - :n AS first_seq
    )
    SELECT up.user_id, up.agent_id, up.first_seq,
           EXISTS (SELECT 1 FROM jobs j
                    WHERE j.tenant_id = :t AND j.project_id = :p AND j.note_id = :job_note
                      AND j.kind = 'memory_extract' AND j.status IN ('pending', 'dispatched')
                  ) AS extraction_waiting
      FROM up
    """
)


async def record_batch(
    session: AsyncSession,
    scope: Scope,
    *,
    thread_id: str,
    user_id: str,
    agent_id: str,
    first_at: datetime,
    last_at: datetime,
    count: int,
    job_note: str,
) -> Row[Any]:
    """Number a batch of ``count`` messages in its thread (made on its first
    batch); the row has ``first_seq``, the thread's ``user_id`` / ``agent_id``
    and ``extraction_waiting``."""
    result = await session.execute(
        _RECORD,
        _of(
            scope,
            tid=thread_id,
            uid=user_id,
            aid=agent_id,
            first=first_at,
            last=last_at,
            n=count,
            job_note=job_note,
        ),
    )
    return result.one()


async def add_to_inbox(
    session: AsyncSession, scope: Scope, *, thread_id: str, messages: Sequence[dict[str, Any]]
) -> None:
    """Messages for extraction; each carries its ``seq``."""
    await session.execute(
        text(
            """
            INSERT INTO memory_inbox (tenant_id, project_id, thread_id, seq, message)
            SELECT :t, :p, :tid, (m->>'seq')::int, m
              FROM unnest(CAST(:msgs AS jsonb[])) AS u(m)
            ON CONFLICT DO NOTHING
            """
        ),
        _of(scope, tid=thread_id, msgs=[json.dumps(m) for m in messages]),
    )


async def inbox(
    session: AsyncSession, scope: Scope, *, thread_id: str, limit: int
) -> list[dict[str, Any]]:
    rows = await session.execute(
        text(
            f"SELECT message FROM memory_inbox WHERE {_MINE} AND thread_id = :tid "
            "ORDER BY seq LIMIT :n"
        ),
        _of(scope, tid=thread_id, n=limit),
    )
    return [json.loads(m) if isinstance(m, str) else m for (m,) in rows]


async def inbox_size(session: AsyncSession, scope: Scope, *, thread_id: str) -> int:
    found = await session.scalar(
        text(f"SELECT count(*) FROM memory_inbox WHERE {_MINE} AND thread_id = :tid"),
        _of(scope, tid=thread_id),
    )
    return int(found or 0)


async def done_with(
    session: AsyncSession, scope: Scope, *, thread_id: str, upto_seq: int, made: int
) -> None:
    """The inbox up to ``upto_seq`` was read and its memories written."""
    await session.execute(
        text(f"DELETE FROM memory_inbox WHERE {_MINE} AND thread_id = :tid AND seq <= :s"),
        _of(scope, tid=thread_id, s=upto_seq),
    )
    await session.execute(
        text(
            "UPDATE memory_threads SET extracted_seq = greatest(extracted_seq, :s + 1), "
            f"memories_made = memories_made + :m WHERE {_MINE} AND id = :tid"
        ),
        _of(scope, tid=thread_id, s=upto_seq, m=made),
    )


async def thread(session: AsyncSession, scope: Scope, thread_id: str) -> Row[Any] | None:
    result = await session.execute(
        text(f"SELECT {_THREAD} FROM memory_threads WHERE {_MINE} AND id = :tid"),
        _of(scope, tid=thread_id),
    )
    return result.one_or_none()


async def threads(
    session: AsyncSession,
    scope: Scope,
    *,
    user_id: str | None,
    agent_id: str | None,
    limit: int,
    offset: int,
) -> list[Row[Any]]:
    result = await session.execute(
        text(
            f"SELECT {_THREAD} FROM memory_threads WHERE {_MINE} "
            "AND (CAST(:uid AS text) IS NULL OR user_id = :uid) "
            "AND (CAST(:aid AS text) IS NULL OR agent_id = :aid) "
            "ORDER BY last_message_at DESC, id LIMIT :n OFFSET :o"
        ),
        _of(scope, uid=user_id, aid=agent_id, n=limit, o=offset),
    )
    return list(result)


async def delete_thread(session: AsyncSession, scope: Scope, thread_id: str) -> bool:
    """Forget the thread's record and unread inbox (its notes stay the notes
    domain's)."""
    await session.execute(
        text(f"DELETE FROM memory_inbox WHERE {_MINE} AND thread_id = :tid"),
        _of(scope, tid=thread_id),
    )
    result = await session.execute(
        text(f"DELETE FROM memory_threads WHERE {_MINE} AND id = :tid RETURNING id"),
        _of(scope, tid=thread_id),
    )
    return result.one_or_none() is not None


async def lock_slot(session: AsyncSession, scope: Scope, key: str) -> None:
    """Hold a slot (subject, attribute, value) of the project to the end of
    the transaction."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
        {"k": f"memory-slot|{scope.tenant_id}|{scope.project_id}|{key}"},
    )
