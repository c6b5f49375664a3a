"""Running one job: claim, heartbeat, load -> compute -> apply, finish or fail.

Every job takes ids only and is safe to run twice. Slow work (models, HTTP
providers) runs outside any database transaction; results are applied in a
transaction that also marks the job done, and only while this run still holds
the claim, so a job that was taken over elsewhere changes nothing. A newer
put changes the note's content hash, and the older job then applies nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope, scope_for_job
from app.db import Database
from app.embeddings import repository as vectors
from app.feed import repository as feed
from app.jobs import repository as jobs
from app.jobs.kinds import CONTENT_KINDS, JobKind
from app.models import Job, Note
from app.notes import repository as notes
from app.pipeline.split import split_parts
from app.providers.embedding.base import Embedder, QueryCache
from app.providers.errors import PermanentError, ProviderError
from app.providers.summarization.base import RelatedNote, Summarizer
from app.settings import Settings

log = logging.getLogger("keepmem.pipeline")


@dataclass
class Pipeline:
    """What background work needs, built once per worker process."""

    db: Database
    settings: Settings
    embedder: Embedder
    summarizer: Summarizer
    query_cache: QueryCache

    async def aclose(self) -> None:
        await self.embedder.aclose()
        await self.summarizer.aclose()


def _stale(job: Job, note: Note | None) -> str | None:
    """Why this job should apply nothing: the note is gone, or the content it
    was queued for has been replaced by a newer put."""
    if note is None:
        return "note deleted"
    expected = job.payload.get("content_hash")
    if expected and note.content_hash != expected:
        return "superseded"
    return None


class _LostClaim(Exception):
    """The job was taken over (stale claim recovered elsewhere): apply nothing."""


@dataclass
class _Run:
    pipeline: Pipeline
    scope: Scope
    job: Job
    token: uuid.UUID

    async def finish(self, session: AsyncSession, result: dict[str, Any]) -> None:
        if not await jobs.finish(
            session, self.scope.tenant_id, self.job.id, self.token, result=result
        ):
            raise _LostClaim


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def backoff(settings: Settings, attempts: int) -> float:
    """30 s, 60 s, 120 s ... capped at an hour (keep's schedule)."""
    return float(
        min(
            settings.job_backoff_base_seconds * 2 ** max(attempts - 1, 0),
            settings.job_backoff_max_seconds,
        )
    )


async def run(pipeline: Pipeline, tenant_id: uuid.UUID, job_id: int) -> str:
    """Run one outbox job to an outcome: done, retry later, dead, or skipped."""
    token = uuid.uuid4()
    async with pipeline.db.tenant_transaction(tenant_id) as session:
        job = await jobs.claim(session, tenant_id, job_id, token)
    if job is None:
        return "not-claimed"
    state = _Run(pipeline, scope_for_job(tenant_id, job.project_id), job, token)
    beat = asyncio.create_task(_heartbeat(state))
    try:
        await HANDLERS[JobKind(job.kind)](state)
        return "done"
    except _LostClaim:
        return "lost-claim"
    except Exception as exc:  # noqa: BLE001 - every failure is recorded on the job row
        return await _record_failure(state, exc)
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat


async def _record_failure(state: _Run, exc: Exception) -> str:
    settings = state.pipeline.settings
    permanent = isinstance(exc, PermanentError) or (
        isinstance(exc, ProviderError) and exc.permanent
    )
    if not isinstance(exc, ProviderError):
        log.exception("job %s (%s) failed", state.job.id, state.job.kind)
    out_of_attempts = state.job.attempts >= settings.job_max_attempts
    retry = None if (permanent or out_of_attempts) else backoff(settings, state.job.attempts)
    async with state.pipeline.db.tenant_transaction(state.scope.tenant_id) as session:
        await jobs.fail(
            session,
            state.scope.tenant_id,
            state.job.id,
            state.token,
            error=f"{type(exc).__name__}: {exc}",
            retry_in_seconds=retry,
        )
    return "dead" if retry is None else "retry"


async def _heartbeat(state: _Run) -> None:
    interval = max(state.pipeline.settings.job_lease_seconds / 3, 0.2)
    while True:
        await asyncio.sleep(interval)
        async with state.pipeline.db.tenant_transaction(state.scope.tenant_id) as session:
            if not await jobs.heartbeat(session, state.scope.tenant_id, state.job.id, state.token):
                return


async def _release_content(session: AsyncSession, state: _Run, note: Note) -> None:
    """Let go of the original content once no queued work needs it.

    A summarizer that uses related notes as context is re-run on tag changes,
    so with one configured the content stays for that future work.
    """
    if note.pending_content is None or state.pipeline.summarizer.uses_context:
        return
    others = await jobs.other_open_jobs(
        session, state.scope, note.id, kinds=CONTENT_KINDS, excluding=state.job.id
    )
    if others == 0:
        await notes.update_note(session, state.scope, note.id, values={"pending_content": None})


# -- handlers ---------------------------------------------------------------------


async def _embed(state: _Run) -> None:
    p, scope, job = state.pipeline, state.scope, state.job
    model = p.embedder.model_id
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "")
        if (reason := _stale(job, note)) is not None or note is None:
            await state.finish(session, {"skipped": reason})
            return
        # The full text while it is held; afterwards (reindex) the summary.
        text = note.pending_content or note.summary
        seen_hash, text_hash = note.content_hash, sha256(text)
        reused = await vectors.vector_for_hash(session, scope.tenant_id, model, text_hash)
    if not text.strip():
        raise PermanentError("nothing to embed: the note has no text")
    vector = reused or (await p.embedder.embed_documents([text]))[0]
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "", lock=True)
        if note is None or note.content_hash != seen_hash:
            await state.finish(session, {"skipped": "superseded"})
            return
        await vectors.upsert(
            session,
            scope,
            note_id=note.id,
            kind="note",
            ref=0,
            model=model,
            content_hash=text_hash,
            vector=vector,
        )
        await _release_content(session, state, note)
        await state.finish(
            session, {"model": model, "dim": len(vector), "reused": reused is not None}
        )


async def _related(session: AsyncSession, state: _Run, note: Note) -> list[RelatedNote]:
    """keep's summary context: notes sharing user tags, by similarity, +20 % per
    extra shared tag, best five."""
    terms = [t for t in note.tag_index if "=" in t]
    if not terms:
        return []
    scope, model = state.scope, state.pipeline.embedder.model_id
    candidates = await notes.sharing_tags(session, scope, terms=terms, exclude=note.id, limit=50)
    vecs = await vectors.vectors_of(session, scope, [note.id, *[c.id for c in candidates]], model)
    mine = vecs.get(note.id)
    related = []
    for other in candidates:
        shared = len(set(terms) & set(other.tag_index))
        theirs = vecs.get(other.id)
        similarity = _cosine(mine, theirs) if mine and theirs else 0.5
        score = similarity * (1 + 0.2 * (shared - 1))
        related.append(RelatedNote(other.id, other.summary, round(score, 4)))
    related.sort(key=lambda r: -r.score)
    return related[: state.pipeline.settings.summary_context_notes]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


async def _summarize(state: _Run) -> None:
    p, scope, job = state.pipeline, state.scope, state.job
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "")
        if (reason := _stale(job, note)) is not None or note is None:
            await state.finish(session, {"skipped": reason})
            return
        if note.pending_content is None:
            raise PermanentError("content no longer held: put the note again to re-summarize")
        text, seen_hash = note.pending_content, note.content_hash
        context = await _related(session, state, note) if p.summarizer.uses_context else []
    summary = await p.summarizer.summarize(
        text, max_chars=p.settings.max_summary_length, context=context
    )
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "", lock=True)
        if note is None or note.content_hash != seen_hash:
            await state.finish(session, {"skipped": "superseded"})
            return
        tags = {**note.tags, "_summarized_hash": (seen_hash or "")[:10]}
        await notes.update_note(session, scope, note.id, values={"summary": summary, "tags": tags})
        await feed.record(session, scope, mutation="doc_update", entity_id=note.id)
        await _release_content(session, state, note)
        await state.finish(
            session,
            {"summarizer": getattr(p.summarizer, "name", "?"), "context": [c.id for c in context]},
        )


async def _analyze(state: _Run) -> None:
    p, scope, job = state.pipeline, state.scope, state.job
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "")
        if (reason := _stale(job, note)) is not None or note is None:
            await state.finish(session, {"skipped": reason})
            return
        given = job.payload.get("content")
        text = given if isinstance(given, str) else note.pending_content
        seen_hash = note.content_hash
    if text is None:
        raise PermanentError("content no longer held: send it with the analyze request")
    if len(text.strip()) < p.settings.analyze_min_chars:
        raise PermanentError(f"content too short to analyze ({len(text.strip())} characters)")
    chunks = split_parts(text, target_chars=p.settings.part_target_chars)
    summaries = [
        await p.summarizer.summarize(c, max_chars=p.settings.max_summary_length) for c in chunks
    ]
    part_vectors = await p.embedder.embed_documents(chunks)
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "", lock=True)
        if note is None or (given is None and note.content_hash != seen_hash):
            await state.finish(session, {"skipped": "superseded"})
            return
        await notes.delete_parts(session, scope, note.id)
        await vectors.delete_for_note(session, scope, note.id, kind="part")
        rows: list[tuple[int, str, dict[str, Any], str, str]] = [
            (i + 1, s, {}, sha256(c), c)
            for i, (s, c) in enumerate(zip(summaries, chunks, strict=True))
        ]
        await notes.insert_parts(session, scope, note.id, rows)
        for (num, _, _, chash, _), vec in zip(rows, part_vectors, strict=True):
            await vectors.upsert(
                session,
                scope,
                note_id=note.id,
                kind="part",
                ref=num,
                model=p.embedder.model_id,
                content_hash=chash,
                vector=vec,
            )
        tags = {**note.tags, "_analyzed_hash": sha256(text)[:10]}
        await notes.update_note(session, scope, note.id, values={"tags": tags})
        await feed.record(
            session, scope, mutation="part_insert", entity_id=note.id, payload={"parts": len(rows)}
        )
        await _release_content(session, state, note)
        await state.finish(session, {"parts": len(rows)})


async def _task(state: _Run) -> None:
    """keep's delegated task: process the content sent with it, store the output."""
    p, job = state.pipeline, state.job
    content = job.payload.get("content")
    task_type = job.payload.get("task_type")
    if not isinstance(content, str) or not content.strip():
        raise PermanentError("task has no content")
    output: dict[str, Any]
    if task_type == "summarize":
        summary = await p.summarizer.summarize(content, max_chars=p.settings.max_summary_length)
        output = {"summary": summary}
    elif task_type == "analyze":
        chunks = split_parts(content, target_chars=p.settings.part_target_chars)
        output = {
            "parts": [
                {
                    "summary": await p.summarizer.summarize(
                        c, max_chars=p.settings.max_summary_length
                    ),
                    "tags": {},
                }
                for c in chunks
            ]
        }
    else:
        raise PermanentError(f"unsupported task type {task_type!r}")
    async with p.db.tenant_transaction(state.scope.tenant_id) as session:
        await state.finish(session, output)


HANDLERS: dict[JobKind, Callable[[_Run], Awaitable[None]]] = {
    JobKind.EMBED: _embed,
    JobKind.REINDEX: _embed,
    JobKind.SUMMARIZE: _summarize,
    JobKind.ANALYZE: _analyze,
    JobKind.TASK: _task,
}
