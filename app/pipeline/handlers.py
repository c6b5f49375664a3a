"""One short handler per job kind. Each reads what it needs, runs a model or
a fetch, and hands the result to the service that owns the data (notes,
graph, ingest, search); job mechanics are ``runner``'s, the load / compute /
apply shape is ``jobrun.on_current_note``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.events import webhooks
from app.graph import service as graph
from app.ingest import documents
from app.jobs import outbox
from app.jobs.kinds import JobKind
from app.kit import spans
from app.kit.fetch import FetchPolicy, fetch
from app.memories import extraction
from app.models import Note
from app.notes import derived
from app.notes import repository as notes
from app.notes import service as note_service
from app.notes.repository import vectors
from app.pipeline import autotag, grounding_jobs, ingest_handlers, prompt_docs
from app.pipeline.jobrun import JobRun, LostClaim, on_current_note, release_held, stale
from app.pipeline.pipeline import Pipeline
from app.pipeline.split import split_parts
from app.providers.errors import PermanentError
from app.providers.extraction_llm import MalformedReply
from app.providers.graph.base import Extraction, extract_all
from app.providers.summarization.base import RelatedNote
from app.retention import service as retention
from app.search.fulltext import service as term_stats_service
from app.sessions import digest
from app.sessions import service as sessions

Handler = Callable[[list[JobRun]], Awaitable[None]]


# -- embeddings (batched per project) ------------------------------------------------


async def embed_batch(runs: list[JobRun], record_failure: Callable[..., Awaitable[str]]) -> None:
    """Embed several notes of one project: one model call, one write."""
    first = runs[0]
    p, scope, model = first.pipeline, first.scope, first.pipeline.embedder.model_id
    live: list[tuple[JobRun, str | None, str, str]] = []  # run, seen hash, text, text hash
    empty: list[JobRun] = []
    async with first.transaction() as session:
        found = await notes.get_many(session, scope, [r.note_id for r in runs])
        for run in runs:
            note = found.get(run.note_id)
            if (reason := stale(run.job, note)) is not None or note is None:
                await run.finish(session, {"skipped": reason})
                continue
            # The full text while it is held; afterwards (reindex) the summary.
            text = note.pending_content or note.summary
            if not text.strip():
                empty.append(run)
                continue
            live.append((run, note.content_hash, text, derived.sha256(text)))
        reused = await vectors.vectors_for_hashes(session, scope, model, [h for *_, h in live])
    for run in empty:
        await record_failure(run, PermanentError("nothing to embed: the note has no text"))
    if not live:
        return
    fresh = {h: t for _, _, t, h in live if h not in reused}
    computed = await p.embedder.embed_documents(list(fresh.values()))
    by_hash = {**reused, **dict(zip(fresh, computed, strict=True))}
    async with first.transaction() as session:
        locked = await notes.get_many(session, scope, [r.note_id for r, *_ in live], lock=True)
        rows, applied, kept = [], [], []
        for run, seen_hash, _, text_hash in live:
            note = locked.get(run.note_id)
            if note is None or note.content_hash != seen_hash:
                await run.finish(session, {"skipped": "superseded"})
                continue
            rows.append((note.id, text_hash, by_hash[text_hash]))
            applied.append((run, text_hash in reused))
            kept.append(note)
        await derived.apply_vectors(session, scope, model=model, rows=rows)
        await release_held(session, [r for r, _ in applied], kept)
        written = [
            n for (r, _), n in zip(applied, kept, strict=True) if r.job.kind == JobKind.EMBED
        ]
        await autotag.queue(session, scope, model=p.summarizer, written=written)
        for was_reused in (False, True):
            ids = [r.job.id for r, reuse in applied if reuse is was_reused]
            result = {"model": model, "dim": p.embedder.dim, "reused": was_reused}
            result |= {"batch": len(live)}
            done = await outbox.finish_many(
                session, scope, job_ids=ids, token=first.token, result=result
            )
            if done != len(ids):
                raise LostClaim


# -- one note at a time ----------------------------------------------------------------


async def summarize(run: JobRun) -> None:
    """The note's summary line, by the project's ``.prompt/summarize/*`` doc
    when the model takes prompts (``app.pipeline.prompt_docs``)."""
    p = run.pipeline
    Loaded = tuple[str, list[RelatedNote], prompt_docs.Chosen | None]

    async def load(session: AsyncSession, note: Note) -> Loaded:
        if note.pending_content is None:
            raise PermanentError("content no longer held: put the note again to re-summarize")
        context = await _related(session, run, note) if p.summarizer.uses_context else []
        chosen = await prompt_docs.for_model(session, run.scope, p.summarizer, "summarize", note)
        return note.pending_content, context, chosen

    async def compute(loaded: Loaded) -> tuple[str, dict[str, Any]]:
        text, context, chosen = loaded
        summary = await p.summarizer.summarize(
            text,
            max_chars=p.settings.max_summary_length,
            context=context,
            system=chosen.text if chosen else None,
        )
        return summary, {"context": [c.id for c in context], "prompt": _doc_id(chosen)}

    async def apply(
        session: AsyncSession, note: Note, made: tuple[str, dict[str, Any]]
    ) -> dict[str, Any]:
        summary, about = made
        await derived.apply_summary(session, run.scope, note=note, summary=summary)
        await release_held(session, [run], [note])
        return {"summarizer": getattr(p.summarizer, "name", "?"), **about}

    await on_current_note(run, load=load, compute=compute, apply=apply)


def _doc_id(chosen: prompt_docs.Chosen | None) -> str | None:
    return chosen.doc_id if chosen else None


async def _related(session: AsyncSession, run: JobRun, note: Note) -> list[RelatedNote]:
    """keep's summary context: notes sharing user tags, by similarity, +20 % per
    extra shared tag, best five."""
    terms = [t for t in note.tag_index if "=" in t]
    if not terms:
        return []
    scope, model = run.scope, run.pipeline.embedder.model_id
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
    return related[: run.pipeline.settings.summary_context_notes]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


async def extract_graph(run: JobRun) -> None:
    """Entities and relations of the note's text (its content while held, else
    its summary), stored with the spans they came from."""
    p = run.pipeline

    async def load(_: AsyncSession, note: Note) -> str:
        return note.pending_content or note.summary

    async def apply(session: AsyncSession, note: Note, found: Any) -> dict[str, Any]:
        counts = await graph.store_extraction(session, run.scope, note_id=note.id, found=found)
        await release_held(session, [run], [note])
        return counts | {"extractor": p.graph().name}

    async def compute(text: str) -> Extraction:
        return await extract_all(p.graph(), text)

    await on_current_note(run, load=load, compute=compute, apply=apply)


async def analyze(run: JobRun) -> None:
    """Split the note's text (held, or sent with the request) into parts, each
    summarised by the project's ``.prompt/analyze/*`` doc when the model takes
    prompts (the split itself is offline)."""
    p = run.pipeline
    given = run.job.payload.get("content")
    Loaded = tuple[str | None, prompt_docs.Chosen | None]

    async def load(session: AsyncSession, note: Note) -> Loaded:
        text = given if isinstance(given, str) else note.pending_content
        chosen = await prompt_docs.for_model(session, run.scope, p.summarizer, "analyze", note)
        return text, chosen

    async def compute(loaded: Loaded) -> tuple[str, list[derived.NewPart], str | None]:
        text, chosen = loaded
        if text is None:
            raise PermanentError("content no longer held: send it with the analyze request")
        if len(text.strip()) < p.settings.analyze_min_chars:
            raise PermanentError(f"content too short to analyze ({len(text.strip())} characters)")
        chunks = split_parts(text, target_chars=p.settings.part_target_chars)
        limit, system = p.settings.max_summary_length, chosen.text if chosen else None
        summaries = [
            await p.summarizer.summarize(c, max_chars=limit, system=system) for c in chunks
        ]
        embedded = await p.embedder.embed_documents(chunks)
        made = zip(summaries, chunks, embedded, strict=True)
        return text, [derived.NewPart(s, c, v) for s, c, v in made], _doc_id(chosen)

    async def apply(
        session: AsyncSession, note: Note, made: tuple[str, list[derived.NewPart], str | None]
    ) -> dict[str, Any]:
        text, parts, doc_id = made
        count = await derived.replace_parts(
            session,
            run.scope,
            note=note,
            analyzed_text=text,
            parts=parts,
            model=p.embedder.model_id,
        )
        await release_held(session, [run], [note])
        return {"parts": count, "prompt": doc_id}

    await on_current_note(run, load=load, compute=compute, apply=apply, same_content=given is None)


async def auto_tag(run: JobRun) -> None:
    """The project's model picks the note's constrained tags (``app.pipeline.autotag``)."""
    model = run.pipeline.summarizer

    async def load(session: AsyncSession, note: Note) -> autotag.Ask | str:
        return await autotag.prepare(session, run.scope, model=model, note=note)

    async def compute(ask: autotag.Ask | str) -> autotag.Answer | str:
        return await autotag.classify(model, ask)

    async def apply(session: AsyncSession, note: Note, got: autotag.Answer | str) -> dict[str, Any]:
        return await autotag.write(session, run.scope, note=note, answer=got)

    await on_current_note(run, load=load, compute=compute, apply=apply)


# -- work that is not a note's -------------------------------------------------------


async def task(run: JobRun) -> None:
    """keep's delegated task: process the content sent with it, store the output."""
    p, payload = run.pipeline, run.job.payload
    content, task_type = payload.get("content"), payload.get("task_type")
    if not isinstance(content, str) or not content.strip():
        raise PermanentError("task has no content")
    limit = p.settings.max_summary_length
    output: dict[str, Any]
    if task_type == "summarize":
        output = {"summary": await p.summarizer.summarize(content, max_chars=limit)}
    elif task_type == "analyze":
        chunks = split_parts(content, target_chars=p.settings.part_target_chars)
        output = {
            "parts": [
                {"summary": await p.summarizer.summarize(c, max_chars=limit), "tags": {}}
                for c in chunks
            ]
        }
    else:
        raise PermanentError(f"unsupported task type {task_type!r}")
    async with run.transaction() as session:
        await run.finish(session, output)


async def term_stats(run: JobRun) -> None:
    """Count the project's common words for find's full-text stage."""
    async with run.transaction() as session:
        found = await term_stats_service.refresh_term_stats(
            session, run.scope, min_notes=run.pipeline.settings.fts_common_term_notes
        )
        await run.finish(session, {"common_terms": found})


async def edge_backfill(run: JobRun) -> None:
    """A tag became (or stopped being) an edge tag: re-make the edges of a
    batch of the notes holding it; the next batch is queued while some remain."""
    key, after = str(run.job.payload.get("key", "")), str(run.job.payload.get("after", ""))
    async with run.transaction() as session:
        done, more = await note_service.backfill_edges(session, run.scope, key=key, after=after)
        if more is not None:
            tag_doc = run.note_id
            await note_service.queue_backfill(
                session, run.scope, tag_doc=tag_doc, key=key, after=more
            )
        await run.finish(session, {"notes": done, "more": more is not None})


async def expire(run: JobRun) -> None:
    """Delete the project's notes past their expiry or its retention (a
    batch; the sweeper queues another while some remain)."""
    async with run.transaction() as session:
        deleted, more = await retention.expire_due(session, run.scope)
        await run.finish(session, {"deleted": deleted, "more": more})


# -- documents -----------------------------------------------------------------------


async def fetch_document(run: JobRun) -> None:
    """Put by URI: fetch (SSRF-checked), read, OCR what has no text, sanitise,
    store as the note's content (which queues embedding and summary)."""
    p, payload = run.pipeline, run.job.payload
    uri = str(payload.get("uri", ""))
    got = await fetch(uri, FetchPolicy.for_settings(p.settings))
    doc = await documents.read(
        got.data, content_type=got.content_type, charset=got.charset,
        max_pdf_pages=p.settings.max_pdf_pages,
    )  # fmt: skip
    text, found = doc.text, dict(doc.tags)
    if doc.images:
        text, found, _ = await _with_ocr(p, doc.images, text, found)
    heard = await ingest_handlers.heard(p, got.data, doc, got.url)  # audio, when configured
    text = heard.text if heard is not None else text
    result = {"url": got.url, "bytes": len(got.data), "type": doc.kind, "chars": len(text)}
    await _store_document(
        run,
        documents.Delivered(
            text=text,
            found_tags=found,
            user_tags=payload.get("tags") or {},
            content_type=doc.kind,
            uri=uri,
            analyze=bool(payload.get("analyze")),
            segments=heard.segments if heard is not None else doc.segments,
        ),
        result | ({"note": doc.note} if doc.note else {}),
    )


async def ocr(run: JobRun) -> None:
    """An upload's images: recognise their text, then store the whole text
    (text layer + OCR) as the note's content, replacing the placeholder."""
    p, payload = run.pipeline, run.job.payload
    async with run.transaction() as session:
        images = await documents.held_images(session, run.scope, job_id=run.job.id)
    text, found, seen = await _with_ocr(
        p, images, str(payload.get("text") or ""), dict(payload.get("tags") or {})
    )
    delivered = documents.Delivered(
        text=text,
        found_tags=found,
        user_tags=payload.get("user_tags") or {},
        content_type=str(payload.get("content_type") or "image/png"),
        segments=spans.from_json(payload.get("segments")),
    )
    await _store_document(
        run, delivered, {"images": len(images), "chars": len(seen)}, release_images=True
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
    run: JobRun,
    delivered: documents.Delivered,
    result: dict[str, Any],
    *,
    release_images: bool = False,
) -> None:
    """Store a fetched or recognised document as its note's content, unless the
    note was deleted meanwhile."""
    async with run.transaction() as session:
        if release_images:
            await documents.release_images(session, run.scope, job_id=run.job.id)
        if await notes.get(session, run.scope, run.note_id) is None:
            await run.finish(session, {"skipped": "note deleted"})
            return
        await documents.deliver(
            session,
            run.scope,
            note_id=run.note_id,
            doc=delivered,
            limits=run.pipeline.settings.limits,
        )
        await run.finish(session, result)


def _one(handler: Callable[[JobRun], Awaitable[None]]) -> Handler:
    async def run_one(runs: list[JobRun]) -> None:
        await handler(runs[0])

    return run_one


async def webhook(run: JobRun) -> None:
    """POST a batch of events to one of the project's webhooks, signed."""
    p, payload = run.pipeline, run.job.payload
    if p.settings.secret_key is None:
        raise PermanentError("KEEPMEM_SECRET_KEY is not set: webhook secrets cannot be read")
    webhook_id = uuid.UUID(str(payload.get("webhook_id")))
    async with run.transaction() as session:
        found = await webhooks.target(
            session,
            run.scope,
            webhook_id=webhook_id,
            server_secret=p.settings.secret_key.get_secret_value(),
        )
        if found is None:
            await run.finish(session, {"skipped": "webhook deleted"})
            return
    url, secret = found
    status = await webhooks.send(
        url,
        secret,
        delivery_id=str(run.job.public_id),
        payload={"webhook_id": str(webhook_id), "events": payload.get("events") or []},
        policy=FetchPolicy.for_settings(
            p.settings, timeout_seconds=p.settings.webhook_timeout_seconds
        ),
    )
    async with run.transaction() as session:
        await run.finish(session, {"status": status})


async def session_digest(run: JobRun) -> None:
    """A session's new events: observations, patterns, a checkpoint when one
    is due, the project's resume block (``app.sessions.digest``)."""
    p, sid = run.pipeline, str(run.job.payload.get("session_id", ""))
    async with run.transaction() as session:
        loaded = await digest.load(
            session, run.scope, session_id=sid, server_budget=p.settings.session_llm_tokens_per_day
        )
        if loaded is None:
            await run.finish(session, {"skipped": "session deleted"})
            return
    compressed = await digest.compress(loaded, p.compressor)
    async with run.transaction() as session:
        result = await digest.apply(
            session, run.scope, loaded, compressed, limits=p.settings.limits,
            trigger=run.job.payload.get("trigger"),
        )  # fmt: skip
    # Apart: a find runs here, and the digest's locks (usage counts, the
    # session row) should not wait for it.
    async with run.transaction() as session:
        if digest.changes_resume(result):
            await sessions.refresh_resume(
                session, run.scope, cwd=loaded.cwd, embedder=p.embedder, cache=p.query_cache
            )
        await run.finish(session, result)


async def memory_extract(run: JobRun) -> None:
    """A thread's new messages: memories read (a model's, or the rules'),
    reconciled with what is believed (``app.memories.extraction``)."""
    p, tid = run.pipeline, str(run.job.payload.get("thread_id", ""))
    async with run.transaction() as session:
        loaded = await extraction.load(
            session,
            run.scope,
            thread_id=tid,
            server_budget=p.settings.memory_llm_tokens_per_day,
            model=p.extractor is not None,
        )
        if loaded is None:
            await run.finish(session, {"skipped": "thread deleted"})
            return
    try:
        got = await extraction.read(loaded, p.extractor)
    except MalformedReply as exc:
        # The call was made and is paid for: it counts against the budget
        # before the job retries.
        async with run.transaction() as session:
            await extraction.count_call(session, run.scope, exc.tokens_in, exc.tokens_out)
        raise
    async with run.transaction() as session:
        result = await extraction.apply(session, run.scope, loaded, got, limits=p.settings.limits)
        await run.finish(session, result)
    mode = "refused" if got.refused else got.mode
    ops = {op: int(result.get(op, 0)) for op in ("add", "supersede", "update", "noop")}
    metrics.observe_extraction(mode, ops, got.tokens_in, got.tokens_out)


HANDLERS: dict[JobKind, Handler] = {
    JobKind.WEBHOOK: _one(webhook),
    JobKind.SUMMARIZE: _one(summarize),
    JobKind.ANALYZE: _one(analyze),
    JobKind.TASK: _one(task),
    JobKind.TERM_STATS: _one(term_stats),
    JobKind.EXPIRE: _one(expire),
    JobKind.FETCH: _one(fetch_document),
    JobKind.OCR: _one(ocr),
    JobKind.EXTRACT_GRAPH: _one(extract_graph),
    JobKind.SESSION_DIGEST: _one(session_digest),
    JobKind.MEMORY_EXTRACT: _one(memory_extract),
    JobKind.AUTO_TAG: _one(auto_tag),
    JobKind.EDGE_BACKFILL: _one(edge_backfill),
    JobKind.CHUNK: _one(grounding_jobs.chunk),
    JobKind.CRAWL: _one(ingest_handlers.crawl),
    JobKind.TRANSCRIBE: _one(ingest_handlers.transcribe),
}
