"""All SQL of the sessions domain (tables of migration 0016): session
records, the digest inbox, recurring patterns, resume blocks and saved
collections (model spend is counted by ``app.usage``). Every statement
filters on the scope's tenant and project; row-level security backs it up."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.tenancy import Scope

_MINE = "tenant_id = :t AND project_id = :p"
MAX_SESSIONS_PER_PATTERN = 50
MAX_FILES_PER_PATTERN = 20


def as_json(value: Any) -> Any:
    """A jsonb value as Python (the driver may hand it over as text)."""
    return json.loads(value) if isinstance(value, str) else value


def _record(row: Row[Any]) -> SimpleNamespace:
    values = dict(row._mapping)
    for name in ("counts", "state", "last_checkpoint", "event", "query"):
        if name in values:
            values[name] = as_json(values[name])
    return SimpleNamespace(**values)


def _of(scope: Scope, **params: Any) -> dict[str, Any]:
    return {"t": scope.tenant_id, "p": scope.project_id, **params}


# One statement for a session's part of a batch: the session row (made or
# updated, and locked to the end of the transaction), its events into the
# inbox, numbered after the session's last, when capture stays on (the
# session's, after the batch's own toggle, and the project's); and whether
# a digest job is queued and not yet taken (it will read these events; the
# digest itself catches the batches it raced with).
_RECORD_EVENTS = text(
    """
    WITH v AS (
        SELECT CAST(:toggle AS boolean) AS toggle, CAST(:pcap AS boolean) AS pcap,
               CAST(:counts AS jsonb) AS counts,
               coalesce(cardinality(CAST(:events AS text[])), 0) AS n
    ), up AS (
        INSERT INTO agent_sessions AS s
            (tenant_id, project_id, id, platform, cwd, started_at, last_event_at,
             counts, capture, next_seq, ended_at, end_reason)
        SELECT :t, :p, :sid, :platform, :cwd, :first, :last,
               CASE WHEN coalesce(v.toggle, true) AND v.pcap THEN v.counts
                    ELSE '{}'::jsonb END,
               coalesce(v.toggle, true),
               CASE WHEN coalesce(v.toggle, true) AND v.pcap THEN v.n ELSE 0 END,
               CAST(:ended_at AS timestamptz), coalesce(CAST(:reason AS text), '')
          FROM v
        ON CONFLICT (tenant_id, project_id, id) DO UPDATE SET
            capture = coalesce((SELECT toggle FROM v), s.capture),
            inject = coalesce((SELECT toggle FROM v), s.inject),
            cwd = CASE WHEN s.cwd = '' THEN EXCLUDED.cwd ELSE s.cwd END,
            last_event_at = greatest(s.last_event_at, EXCLUDED.last_event_at),
            started_at = least(s.started_at, EXCLUDED.started_at),
            next_seq = s.next_seq + (
                SELECT CASE WHEN coalesce(v.toggle, s.capture) AND v.pcap THEN v.n ELSE 0 END
                  FROM v),
            counts = CASE WHEN (SELECT coalesce(v.toggle, s.capture) AND v.pcap FROM v) THEN (
                SELECT coalesce(jsonb_object_agg(k, coalesce((s.counts->>k)::int, 0)
                                + coalesce((v.counts->>k)::int, 0)), '{}'::jsonb)
                  FROM v, jsonb_object_keys(s.counts || v.counts) AS k
            ) ELSE s.counts END,
            ended_at = coalesce(EXCLUDED.ended_at, s.ended_at),
            end_reason = CASE WHEN EXCLUDED.ended_at IS NULL THEN s.end_reason
                              ELSE EXCLUDED.end_reason END
        RETURNING capture, inject, next_seq,
            next_seq - CASE WHEN capture AND (SELECT pcap FROM v) THEN (SELECT n FROM v)
                            ELSE 0 END AS first_seq
    ), inbox AS (
        INSERT INTO session_inbox (tenant_id, project_id, session_id, seq, event)
        SELECT :t, :p, :sid, up.first_seq + u.ord, CAST(u.e AS jsonb)
          FROM up, unnest(CAST(:events AS text[])) WITH ORDINALITY AS u(e, ord)
         WHERE up.capture AND (SELECT pcap FROM v)
        ON CONFLICT DO NOTHING
    )
    SELECT up.capture, up.inject, up.first_seq,
           up.capture AND (SELECT pcap FROM v) AS stored,
           EXISTS (SELECT 1 FROM jobs j
                    WHERE j.tenant_id = :t AND j.project_id = :p AND j.note_id = :job_note
                      AND j.kind = 'session_digest' AND j.status IN ('pending', 'dispatched')
                  ) AS digest_waiting
      FROM up
    """
)


async def record_events(
    session: AsyncSession,
    scope: Scope,
    *,
    session_id: str,
    platform: str,
    cwd: str,
    first_at: datetime,
    last_at: datetime,
    events: Sequence[dict[str, Any]],
    counts: dict[str, int],
    toggle: bool | None,
    project_capture: bool,
    ended: tuple[datetime, str] | None,
    job_note: str,
) -> Row[Any]:
    """Record a batch of a session's (cleaned) events; the row returned has
    ``capture``, ``inject``, ``stored`` (whether the events went in) and
    ``digest_waiting``."""
    row = (
        await session.execute(
            _RECORD_EVENTS,
            _of(
                scope,
                sid=session_id,
                platform=platform,
                cwd=cwd,
                first=first_at,
                last=last_at,
                events=[json.dumps(ev) for ev in events],
                counts=json.dumps(counts),
                toggle=toggle,
                pcap=project_capture,
                ended_at=ended[0] if ended else None,
                reason=ended[1] if ended else None,
                job_note=job_note,
            ),
        )
    ).one()
    return row


async def inbox(
    session: AsyncSession, scope: Scope, *, session_id: str, limit: int
) -> list[tuple[int, dict[str, Any]]]:
    rows = await session.execute(
        text(
            f"SELECT seq, event FROM session_inbox WHERE {_MINE} AND session_id = :sid "
            "ORDER BY seq LIMIT :n"
        ),
        _of(scope, sid=session_id, n=limit),
    )
    return [(int(r.seq), dict(as_json(r.event))) for r in rows]


async def drop_from_inbox(
    session: AsyncSession, scope: Scope, *, session_id: str, through: int
) -> None:
    await session.execute(
        text(f"DELETE FROM session_inbox WHERE {_MINE} AND session_id = :sid AND seq <= :s"),
        _of(scope, sid=session_id, s=through),
    )


_COLUMNS = (
    "id, platform, cwd, started_at, last_event_at, ended_at, end_reason, counts, summary, "
    "capture, inject, next_seq, digested_seq, checkpoints, checkpoint_seq, state, last_checkpoint"
)


async def get(
    session: AsyncSession, scope: Scope, session_id: str, *, lock: bool = False
) -> SimpleNamespace | None:
    row = (
        await session.execute(
            text(
                f"SELECT {_COLUMNS} FROM agent_sessions WHERE {_MINE} AND id = :sid"
                + (" FOR UPDATE" if lock else "")
            ),
            _of(scope, sid=session_id),
        )
    ).one_or_none()
    return None if row is None else _record(row)


async def recent(
    session: AsyncSession, scope: Scope, *, limit: int, cwd: str | None = None
) -> list[SimpleNamespace]:
    where = f"{_MINE}" + (" AND cwd = :cwd" if cwd else "")
    rows = await session.execute(
        text(
            f"SELECT {_COLUMNS} FROM agent_sessions WHERE {where} "
            "ORDER BY last_event_at DESC, id LIMIT :n"
        ),
        _of(scope, n=limit, cwd=cwd),
    )
    return [_record(r) for r in rows]


async def update(session: AsyncSession, scope: Scope, session_id: str, **values: Any) -> bool:
    """Set columns of a session (names from this module's callers only)."""
    assigns = ", ".join(f"{name} = :v_{name}" for name in values)
    params = _of(scope, sid=session_id, **{f"v_{k}": v for k, v in values.items()})
    result = await session.execute(
        text(f"UPDATE agent_sessions SET {assigns} WHERE {_MINE} AND id = :sid"), params
    )
    return bool(getattr(result, "rowcount", 0))


async def bump_pattern(
    session: AsyncSession,
    scope: Scope,
    *,
    kind: str,
    key: str,
    template: str,
    example: str,
    session_id: str,
    files: Sequence[str],
    n: int,
    at: datetime,
) -> int:
    """Count ``n`` more sightings of a pattern (made on first sight);
    returns its count."""
    count = await session.scalar(
        text(
            """
            INSERT INTO session_patterns AS x
                (tenant_id, project_id, kind, key, template, example, count, sessions, files,
                 first_seen, last_seen)
            VALUES (:t, :p, :kind, :key, :template, :example, :n, ARRAY[CAST(:sid AS text)],
                    CAST(:files AS text[]), :at, :at)
            ON CONFLICT (tenant_id, project_id, kind, key) DO UPDATE SET
                count = x.count + :n,
                example = EXCLUDED.example,
                last_seen = greatest(x.last_seen, EXCLUDED.last_seen),
                sessions = CASE WHEN CAST(:sid AS text) = ANY(x.sessions) THEN x.sessions
                    ELSE (x.sessions || ARRAY[CAST(:sid AS text)])
                         [greatest(1, cardinality(x.sessions) + 2 - :ms):]
                    END,
                files = (SELECT coalesce(array_agg(f), '{}') FROM (
                    SELECT DISTINCT unnest(x.files || EXCLUDED.files) AS f LIMIT :mf) u)
            RETURNING count
            """
        ),
        _of(
            scope,
            kind=kind,
            key=key,
            template=template,
            example=example,
            sid=session_id,
            files=list(files)[:MAX_FILES_PER_PATTERN],
            n=n,
            at=at,
            ms=MAX_SESSIONS_PER_PATTERN,
            mf=MAX_FILES_PER_PATTERN,
        ),
    )
    return int(count or 0)


async def patterns(
    session: AsyncSession, scope: Scope, *, kinds: Sequence[str] | None, limit: int
) -> list[Row[Any]]:
    where = _MINE + (" AND kind = ANY(:kinds)" if kinds else "")
    rows = await session.execute(
        text(
            "SELECT kind, key, template, example, count, sessions, files, first_seen, last_seen "
            f"FROM session_patterns WHERE {where} "
            "ORDER BY cardinality(sessions) DESC, count DESC, last_seen DESC LIMIT :n"
        ),
        _of(scope, kinds=list(kinds or []), n=limit),
    )
    return list(rows)


async def put_resume(session: AsyncSession, scope: Scope, *, cwd: str, context: str) -> None:
    await session.execute(
        text(
            "INSERT INTO session_resume (tenant_id, project_id, cwd, context, computed_at) "
            "VALUES (:t, :p, :cwd, :c, now()) ON CONFLICT (tenant_id, project_id, cwd) "
            "DO UPDATE SET context = EXCLUDED.context, computed_at = now()"
        ),
        _of(scope, cwd=cwd, c=context),
    )


async def resume_state(
    session: AsyncSession, scope: Scope, *, cwd: str, session_id: str | None
) -> Row[Any] | None:
    """The resume block for ``cwd`` (else the project's), with the session's
    own inject flag, in one statement (what a hook waits on)."""
    return (
        await session.execute(
            text(
                f"""
                SELECT (SELECT context FROM session_resume
                         WHERE {_MINE} AND cwd IN (:cwd, '')
                         ORDER BY cwd = :cwd DESC LIMIT 1) AS context,
                       (SELECT inject FROM agent_sessions WHERE {_MINE} AND id = :sid) AS inject
                """
            ),
            _of(scope, cwd=cwd, sid=session_id or ""),
        )
    ).one_or_none()


async def idle(session: AsyncSession, *, before: datetime, limit: int) -> list[Row[Any]]:
    """Sessions of every tenant with events since their last checkpoint and
    none since ``before`` (system transaction)."""
    rows = await session.execute(
        text(
            "SELECT tenant_id, project_id, id FROM agent_sessions "
            "WHERE checkpoint_seq < next_seq AND ended_at IS NULL AND last_event_at < :b "
            "ORDER BY last_event_at LIMIT :n"
        ),
        {"b": before, "n": limit},
    )
    return list(rows)


async def put_collection(
    session: AsyncSession, scope: Scope, *, name: str, query: dict[str, Any], description: str
) -> None:
    await session.execute(
        text(
            "INSERT INTO session_collections (tenant_id, project_id, name, query, description) "
            "VALUES (:t, :p, :n, CAST(:q AS jsonb), :d) "
            "ON CONFLICT (tenant_id, project_id, name) DO UPDATE SET "
            "query = EXCLUDED.query, description = EXCLUDED.description"
        ),
        _of(scope, n=name, q=json.dumps(query), d=description),
    )


async def collections(
    session: AsyncSession, scope: Scope, *, name: str | None = None
) -> list[SimpleNamespace]:
    where = _MINE + (" AND name = :n" if name is not None else "")
    rows = await session.execute(
        text(
            f"SELECT name, query, description FROM session_collections WHERE {where} "
            "ORDER BY name LIMIT 1000"
        ),
        _of(scope, n=name),
    )
    return [_record(r) for r in rows]


async def delete_collection(session: AsyncSession, scope: Scope, *, name: str) -> bool:
    result = await session.execute(
        text(f"DELETE FROM session_collections WHERE {_MINE} AND name = :n"), _of(scope, n=name)
    )
    return bool(getattr(result, "rowcount", 0))
