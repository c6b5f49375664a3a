"""The grounding domain's background work: cutting a long note into
passages (``chunk``). Load, compute and apply as every note job does
(``jobrun.on_current_note``): the cut and the embeddings run outside any
transaction, the parts are written only if the note still has that text."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.grounding import passages
from app.models import Note
from app.notes import derived
from app.pipeline.jobrun import JobRun, on_current_note, release_held
from app.providers.errors import PermanentError

EMBED_SLICE = 16  # passages per embedding call


async def chunk(run: JobRun) -> None:
    """The note's passages: parts with their spans, locators, vectors and
    full text (a text that fits in one passage is left whole)."""
    p = run.pipeline
    settings = p.settings

    async def load(session: AsyncSession, note: Note) -> passages.Source | None:
        return await passages.source(session, run.scope, note, run.job.payload)

    async def compute(src: passages.Source | None) -> tuple[str, list[derived.NewPart]]:
        if src is None:
            raise PermanentError(passages.NOTHING_TO_CUT)
        found = await asyncio.to_thread(passages.cut, src.text, src.segments, settings)
        if not found:
            return src.text, []
        # A slice at a time: the worker's embedder serves one call at a time,
        # and another tenant's one-line note waits for one slice, not a book.
        vectors: list[list[float]] = []
        for start in range(0, len(found), EMBED_SLICE):
            batch = found[start : start + EMBED_SLICE]
            vectors += await p.embedder.embed_documents([x.text for x in batch])
        made = [
            derived.NewPart(
                summary=passages.summary_of(x.text),
                text=x.text,
                vector=v,
                span=(x.start, x.end),
                locator=x.locator,
            )
            for x, v in zip(found, vectors, strict=True)
        ]
        return src.text, made

    async def apply(
        session: AsyncSession, note: Note, made: tuple[str, list[derived.NewPart]]
    ) -> dict[str, Any]:
        text, parts = made
        result: dict[str, Any] = {
            "passages": len(parts),
            "tokens": settings.passage_tokens,
            "overlap": settings.passage_overlap,
        }
        if parts:
            await derived.replace_parts(
                session,
                run.scope,
                note=note,
                analyzed_text=text,
                parts=parts,
                model=p.embedder.model_id,
                marker="_chunked_hash",
            )
        else:
            result["whole"] = "the text fits in one passage"
        await release_held(session, [run], [note])
        return result

    await on_current_note(run, load=load, compute=compute, apply=apply)
