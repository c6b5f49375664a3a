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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import Scope, scope_for_job
from app.db import Database
from app.embeddings import repository as vectors
from app.feed import repository as feed
from app.graph import service as graph
from app.ingest import documents
from app.ingest.fetch import FetchPolicy, fetch
from app.jobs import repository as jobs
from app.jobs.kinds import CONTENT_KINDS, JobKind
from app.models import Job, Note
from app.notes import repository as notes
from app.notes.service import limits_of
from app.pipeline.split import split_parts
from app.providers.embedding.base import Embedder, QueryCache
from app.providers.errors import PermanentError, ProviderError
from app.providers.factory import make_describer, make_graph_extractor
from app.providers.graph.base import GraphExtractor
from app.providers.media.describe import Describer
from app.providers.ocr.base import OCR
from app.providers.ocr.base import registry as ocr_engines
from app.providers.summarization.base import RelatedNote, Summarizer
from app.search import repository as search
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
    ocr_engine: OCR | None = None
    graph_extractor: GraphExtractor | None = None
    describer_instance: Describer | None = None

    def describer(self) -> Describer | None:
        """The optional image describer (media_provider), loaded on first use."""
        if self.describer_instance is None:
            self.describer_instance = make_describer(self.settings)
        return self.describer_instance

    def graph(self) -> GraphExtractor:
        """The entity/relation extractor, loaded on first use."""
        if self.graph_extractor is None:
            self.graph_extractor = make_graph_extractor(self.settings)
        return self.graph_extractor

    def ocr(self) -> OCR:
        """The OCR engine, loaded on first use (most workers never need it)."""
        if self.ocr_engine is None:
            self.ocr_engine = ocr_engines.create(self.settings.ocr_provider)
        return self.ocr_engine

    async def aclose(self) -> None:
        await self.embedder.aclose()
        await self.summarizer.aclose()
        if self.graph_extractor is not None:
            await self.graph_extractor.aclose()


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


VECTOR_KINDS = (JobKind.EMBED.value, JobKind.REINDEX.value)


async def run(pipeline: Pipeline, tenant_id: uuid.UUID, job_id: int) -> str:
    """Run one outbox job to an outcome: done, retry, dead, skipped or not claimed."""
    return (await run_batch(pipeline, tenant_id, [job_id])).get(job_id, "not-claimed")


async def run_batch(
    pipeline: Pipeline, tenant_id: uuid.UUID, job_ids: Sequence[int]
) -> dict[int, str]:
    """Run several jobs of one tenant. Embedding jobs of a project share one
    model call and one write; other kinds run one after another."""
    token = uuid.uuid4()
    async with pipeline.db.tenant_transaction(tenant_id) as session:
        claimed = await jobs.claim_many(session, tenant_id, job_ids, token)
    if not claimed:
        return {}
    beat = asyncio.create_task(_heartbeat(pipeline, tenant_id, [j.id for j in claimed], token))
    outcomes: dict[int, str] = {}
    try:
        groups: dict[uuid.UUID, list[_Run]] = {}
        for job in claimed:
            state = _Run(pipeline, scope_for_job(tenant_id, job.project_id), job, token)
            if job.kind in VECTOR_KINDS:
                groups.setdefault(job.project_id, []).append(state)
            else:
                outcomes |= await _guard([state], HANDLERS[JobKind(job.kind)])
        for states in groups.values():
            outcomes |= await _guard(states, _embed_batch)
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
    return outcomes


async def _guard(
    states: list[_Run], handler: Callable[[list[_Run]], Awaitable[None]]
) -> dict[int, str]:
    try:
        await handler(states)
        return {s.job.id: "done" for s in states}
    except _LostClaim:
        return {s.job.id: "lost-claim" for s in states}
    except Exception as exc:  # noqa: BLE001 - every failure is recorded on the job row
        return {s.job.id: await _record_failure(s, exc) for s in states}


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
        if retry is None and state.job.kind == JobKind.OCR.value:
            await documents.release_images(session, state.scope, state.job.id)
        if retry is None and state.job.kind in (JobKind.FETCH.value, JobKind.OCR.value):
            # The placeholder says what happened instead of promising text.
            await documents.give_up(session, state.scope, state.job.note_id or "", str(exc))
    return "dead" if retry is None else "retry"


async def _heartbeat(
    pipeline: Pipeline, tenant_id: uuid.UUID, job_ids: list[int], token: uuid.UUID
) -> None:
    interval = max(pipeline.settings.job_lease_seconds / 3, 0.2)
    while True:
        await asyncio.sleep(interval)
        async with pipeline.db.tenant_transaction(tenant_id) as session:
            if not await jobs.heartbeat_many(session, tenant_id, job_ids, token):
                return


async def _release_content(session: AsyncSession, states: list[_Run], held: list[Note]) -> None:
    """Let go of original content once no queued work needs it.

    A summarizer that uses related notes as context is re-run on tag changes,
    so with one configured the content stays for that future work.
    """
    if not states or states[0].pipeline.summarizer.uses_context:
        return
    held = [n for n in held if n.pending_content is not None]
    if not held:
        return
    scope = states[0].scope
    busy = await jobs.notes_with_open_jobs(
        session,
        scope,
        [n.id for n in held],
        kinds=CONTENT_KINDS,
        excluding=[s.job.id for s in states],
    )
    free = [n.id for n in held if n.id not in busy]
    if free:
        await notes.clear_pending_content(session, scope, free)


# -- handlers ---------------------------------------------------------------------


async def _embed_batch(states: list[_Run]) -> None:
    """Embed several notes of one project: one model call, one write."""
    p, scope = states[0].pipeline, states[0].scope
    model = p.embedder.model_id
    live: list[tuple[_Run, str | None, str, str]] = []  # state, seen hash, text, text hash
    empty: list[_Run] = []
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        found = await notes.get_many(session, scope, [s.job.note_id or "" for s in states])
        for state in states:
            note = found.get(state.job.note_id or "")
            if (reason := _stale(state.job, note)) is not None or note is None:
                await state.finish(session, {"skipped": reason})
                continue
            # The full text while it is held; afterwards (reindex) the summary.
            text = note.pending_content or note.summary
            if not text.strip():
                empty.append(state)
                continue
            live.append((state, note.content_hash, text, sha256(text)))
        reused = await vectors.vectors_for_hashes(
            session, scope.tenant_id, model, [h for *_, h in live]
        )
    for state in empty:
        await _record_failure(state, PermanentError("nothing to embed: the note has no text"))
    if not live:
        return
    fresh_texts = {h: t for _, _, t, h in live if h not in reused}
    computed = await p.embedder.embed_documents(list(fresh_texts.values()))
    by_hash = {**reused, **dict(zip(fresh_texts, computed, strict=True))}
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        locked = await notes.get_many(
            session, scope, [s.job.note_id or "" for s, *_ in live], lock=True
        )
        rows, applied, kept = [], [], []
        for state, seen_hash, _, text_hash in live:
            note = locked.get(state.job.note_id or "")
            if note is None or note.content_hash != seen_hash:
                await state.finish(session, {"skipped": "superseded"})
                continue
            rows.append((note.id, text_hash, by_hash[text_hash]))
            applied.append((state, text_hash in reused))
            kept.append(note)
        await vectors.upsert_notes(session, scope, model=model, rows=rows)
        await _release_content(session, [s for s, _ in applied], kept)
        for was_reused in (False, True):
            ids = [st.job.id for st, r in applied if r is was_reused]
            result = {
                "model": model,
                "dim": p.embedder.dim,
                "reused": was_reused,
                "batch": len(live),
            }
            finished = await jobs.finish_many(
                session, scope.tenant_id, ids, states[0].token, result=result
            )
            if finished != len(ids):
                raise _LostClaim


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
        await _release_content(session, [state], [note])
        await state.finish(
            session,
            {"summarizer": getattr(p.summarizer, "name", "?"), "context": [c.id for c in context]},
        )


async def _extract_graph(state: _Run) -> None:
    """Entities and relations of the note's text (its content while held, else
    its summary), stored with the spans they came from."""
    p, scope, job = state.pipeline, state.scope, state.job
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "")
        if (reason := _stale(job, note)) is not None or note is None:
            await state.finish(session, {"skipped": reason})
            return
        text, seen_hash = note.pending_content or note.summary, note.content_hash
    found = await p.graph().extract(text)
    async with p.db.tenant_transaction(scope.tenant_id) as session:
        note = await notes.get(session, scope, job.note_id or "", lock=True)
        if note is None or note.content_hash != seen_hash:
            await state.finish(session, {"skipped": "superseded"})
            return
        counts = await graph.store_extraction(session, scope, note.id, found)
        await _release_content(session, [state], [note])
        await state.finish(session, counts | {"extractor": p.graph().name})


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
        await _release_content(session, [state], [note])
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


async def _fetch(state: _Run) -> None:
    """Put by URI: fetch (SSRF-checked), read, OCR what has no text, sanitise,
    store as the note's content (which queues embedding and summary)."""
    p, job = state.pipeline, state.job
    uri = str(job.payload.get("uri", ""))
    policy = FetchPolicy.of(
        max_bytes=p.settings.fetch_max_bytes,
        timeout_seconds=p.settings.fetch_timeout_seconds,
        allow_networks=p.settings.fetch_allow_networks,
    )
    got = await fetch(uri, policy)
    doc = await documents.read(
        got.data,
        content_type=got.content_type,
        charset=got.charset,
        max_pdf_pages=p.settings.max_pdf_pages,
    )
    text, found = doc.text, dict(doc.tags)
    if doc.images:
        text, found, _ = await _with_ocr(p, doc.images, text, found)
    result = {"url": got.url, "bytes": len(got.data), "type": doc.kind, "chars": len(text)}
    await _store_document(
        state,
        text=text,
        found=found,
        user_tags=job.payload.get("tags") or {},
        content_type=doc.kind,
        result=result | ({"note": doc.note} if doc.note else {}),
        uri=uri,
        analyze=bool(job.payload.get("analyze")),
    )


async def _with_ocr(
    p: Pipeline, images: list[bytes], text: str, found: dict[str, Any]
) -> tuple[str, dict[str, Any], str]:
    """The text with the images' OCR (and description) appended, the tags with
    ``ocr_confidence``, and the recognised text alone."""
    seen, confidence = await documents.recognize(p.ocr(), images, p.describer())
    text = "\n\n".join(t for t in (text, seen) if t.strip())
    if seen:
        found = found | {"ocr_confidence": f"{confidence:.2f}"}
    return text, found, seen


async def _store_document(
    state: _Run,
    *,
    text: str,
    found: dict[str, Any],
    user_tags: dict[str, Any],
    content_type: str,
    result: dict[str, Any],
    uri: str | None = None,
    analyze: bool = False,
    release_images: bool = False,
) -> None:
    """Store a fetched or recognised document as its note's content, unless the
    note was deleted meanwhile."""
    p, job = state.pipeline, state.job
    async with p.db.tenant_transaction(state.scope.tenant_id) as session:
        if release_images:
            await documents.release_images(session, state.scope, job.id)
        if await notes.get(session, state.scope, job.note_id or "") is None:
            await state.finish(session, {"skipped": "note deleted"})
            return
        await documents.store(
            session,
            state.scope,
            note_id=job.note_id or "",
            text=text,
            found_tags=found,
            user_tags=user_tags,
            content_type=content_type,
            limits=limits_of(p.settings),
            uri=uri,
            analyze=analyze,
        )
        await state.finish(session, result)


async def _ocr(state: _Run) -> None:
    """An upload's images: recognise their text, then store the whole text
    (text layer + OCR) as the note's content, replacing the placeholder."""
    p, job = state.pipeline, state.job
    async with p.db.tenant_transaction(state.scope.tenant_id) as session:
        images = await documents.held_images(session, state.scope, job.id)
    text, found, seen = await _with_ocr(
        p, images, str(job.payload.get("text") or ""), dict(job.payload.get("tags") or {})
    )
    await _store_document(
        state,
        text=text,
        found=found,
        user_tags=job.payload.get("user_tags") or {},
        content_type=str(job.payload.get("content_type") or "image/png"),
        result={"images": len(images), "chars": len(seen)},
        release_images=True,
    )


async def _term_stats(state: _Run) -> None:
    """Count the project's common words for find's full-text stage."""
    p = state.pipeline
    async with p.db.tenant_transaction(state.scope.tenant_id) as session:
        found = await search.refresh_term_stats(
            session, state.scope, min_notes=p.settings.fts_common_term_notes
        )
        await state.finish(session, {"common_terms": found})


def _one(handler: Callable[[_Run], Awaitable[None]]) -> Callable[[list[_Run]], Awaitable[None]]:
    async def run_one(states: list[_Run]) -> None:
        await handler(states[0])

    return run_one


HANDLERS: dict[JobKind, Callable[[list[_Run]], Awaitable[None]]] = {
    JobKind.EMBED: _embed_batch,
    JobKind.REINDEX: _embed_batch,
    JobKind.SUMMARIZE: _one(_summarize),
    JobKind.ANALYZE: _one(_analyze),
    JobKind.TASK: _one(_task),
    JobKind.TERM_STATS: _one(_term_stats),
    JobKind.FETCH: _one(_fetch),
    JobKind.OCR: _one(_ocr),
    JobKind.EXTRACT_GRAPH: _one(_extract_graph),
}
