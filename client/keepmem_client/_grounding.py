"""Grounding: the methods ``Keepmem`` and ``AsyncKeepmem`` take from
``Grounding`` and ``AsyncGrounding`` (the calls are described once, in
``_calls_grounding``).

Citations need the project to keep text (``update_settings(keep_text=True)``):
without it citing is a ``ConflictError`` with code ``text_not_kept``. Citing
and verifying are safe to repeat (the same span of the same text is one
citation), so they are retried like reads; a crawl, a re-chunk and a
distillation are writes and never repeated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from keepmem_client import _calls_grounding as calls
from keepmem_client import _models as m
from keepmem_client._calls import Tags
from keepmem_client._calls_grounding import Source

if TYPE_CHECKING:
    import httpx

    from keepmem_client._base import Call

T = TypeVar("T")

CitationLike = str | m.Citation | Mapping[str, Any]


class Grounding:
    """Citations, re-cutting, crawls and distillation for the sync client."""

    if TYPE_CHECKING:  # given by the client this is mixed into

        def _send(self, call: Call[Any]) -> httpx.Response: ...

        def _run(self, call: Call[T]) -> T: ...

    def cite(
        self, note: str, *, part: int | None = None, start: int | None = None,
        end: int | None = None, quote: str | None = None, context_chars: int | None = None,
    ) -> m.Citation:  # fmt: skip
        """Cite a passage (``part``: its number), a character range (``start``,
        ``end``) or a ``quote`` of a note, stored: the exact quote, context,
        page and the sha256 of the note's text. ``ConflictError``
        (``text_not_kept``) when the project keeps no text; ``BadRequestError``
        for a span outside the text or a quote that does not match."""
        return self._run(
            calls.cite(
                note, part=part, start=start, end=end, quote=quote, context_chars=context_chars
            )
        )

    def citation(self, citation_id: str) -> m.Citation:
        """One stored citation (``NotFoundError``, ``citation_not_found``, if none)."""
        return self._run(calls.citation(citation_id))

    def citations(
        self, note: str | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> m.CitationPage:
        """A page of the project's citations (of ``note`` only), newest first;
        pass ``next_cursor`` back as ``cursor`` for the next."""
        return self._run(calls.citations(note=note, limit=limit, cursor=cursor))

    def iter_citations(
        self, note: str | None = None, *, page_size: int = 100
    ) -> Iterator[m.Citation]:
        """Every citation (of ``note``), page by page as you iterate."""
        cursor: str | None = None
        while True:
            page = self.citations(note, limit=page_size, cursor=cursor)
            yield from page.citations
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def delete_citation(self, citation_id: str) -> dict[str, Any]:
        return self._run(calls.delete_citation(citation_id))

    def verify_citation(self, citation: CitationLike) -> m.CitationVerdict:
        """Re-read what a citation quotes: ``valid``, ``changed`` (with a
        diagnosis), ``gone`` or ``unverifiable``. A stored citation by its id
        (or as a ``Citation``); one ``find(cite=True)`` returned, as given."""
        return self._run(calls.verify_citation(citation))

    def open_citation(self, citation_id: str, format: str = "text") -> str:
        """The note's text around the quote, the quote marked (``[[ ]]`` in
        text, ``<mark>`` with ``format="html"``)."""
        call = calls.open_citation(citation_id, format=format)
        return call.parse(self._send(call).text)

    def rechunk(self, after: str | None = None, limit: int | None = None) -> m.RechunkResult:
        """Queue a batch of the project's long notes to be cut into passages
        again; call again with ``next_after`` as ``after`` until it is None."""
        return self._run(calls.rechunk(after=after, limit=limit))

    def crawl(
        self, uri: str, *, max_depth: int | None = None, max_pages: int | None = None,
        max_bytes: int | None = None, tags: Mapping[str, str] | None = None,
        path_prefix: str | None = None,
    ) -> m.CrawlStarted:  # fmt: skip
        """Store a page and the same-site pages it links to (robots.txt obeyed,
        within the limits), in the background as ``crawl`` jobs."""
        return self._run(
            calls.crawl(
                uri, max_depth=max_depth, max_pages=max_pages, max_bytes=max_bytes, tags=tags,
                path_prefix=path_prefix,
            )
        )  # fmt: skip

    def distill(
        self, sources: Sequence[Source], *, prompt: str = "memory", statement: str | None = None,
        subject: str | None = None, user_id: str | None = None, tags: Tags | None = None,
        kind: str | None = None, agent_id: str | None = None,
    ) -> m.Distilled:  # fmt: skip
        """A memory made from 1-50 sources (citation ids, ``Citation``s, or
        ``{"note", "part"}`` / ``{"note", "start", "end"}``) with
        ``derived_from`` edges to them: written by the server's model with
        the project's ``.prompt/distill/<prompt>`` (facts, patterns, insights,
        relationships, entities, memory), or ``statement`` as you wrote it.
        Never retried."""
        return self._run(
            calls.distill(
                sources, prompt=prompt, statement=statement, subject=subject, user_id=user_id,
                tags=tags, kind=kind, agent_id=agent_id,
            )
        )  # fmt: skip


class AsyncGrounding:
    """``Grounding`` for the async client: the same methods, awaited."""

    if TYPE_CHECKING:  # given by the client this is mixed into

        async def _send(self, call: Call[Any]) -> httpx.Response: ...

        async def _run(self, call: Call[T]) -> T: ...

    async def cite(
        self, note: str, *, part: int | None = None, start: int | None = None,
        end: int | None = None, quote: str | None = None, context_chars: int | None = None,
    ) -> m.Citation:  # fmt: skip
        """Cite a passage, a character range or a quote of a note, stored."""
        return await self._run(
            calls.cite(
                note, part=part, start=start, end=end, quote=quote, context_chars=context_chars
            )
        )

    async def citation(self, citation_id: str) -> m.Citation:
        return await self._run(calls.citation(citation_id))

    async def citations(
        self, note: str | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> m.CitationPage:
        return await self._run(calls.citations(note=note, limit=limit, cursor=cursor))

    async def iter_citations(
        self, note: str | None = None, *, page_size: int = 100
    ) -> AsyncIterator[m.Citation]:
        cursor: str | None = None
        while True:
            page = await self.citations(note, limit=page_size, cursor=cursor)
            for found in page.citations:
                yield found
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def delete_citation(self, citation_id: str) -> dict[str, Any]:
        return await self._run(calls.delete_citation(citation_id))

    async def verify_citation(self, citation: CitationLike) -> m.CitationVerdict:
        return await self._run(calls.verify_citation(citation))

    async def open_citation(self, citation_id: str, format: str = "text") -> str:
        call = calls.open_citation(citation_id, format=format)
        return call.parse((await self._send(call)).text)

    async def rechunk(self, after: str | None = None, limit: int | None = None) -> m.RechunkResult:
        return await self._run(calls.rechunk(after=after, limit=limit))

    async def crawl(
        self, uri: str, *, max_depth: int | None = None, max_pages: int | None = None,
        max_bytes: int | None = None, tags: Mapping[str, str] | None = None,
        path_prefix: str | None = None,
    ) -> m.CrawlStarted:  # fmt: skip
        return await self._run(
            calls.crawl(
                uri, max_depth=max_depth, max_pages=max_pages, max_bytes=max_bytes, tags=tags,
                path_prefix=path_prefix,
            )
        )  # fmt: skip

    async def distill(
        self, sources: Sequence[Source], *, prompt: str = "memory", statement: str | None = None,
        subject: str | None = None, user_id: str | None = None, tags: Tags | None = None,
        kind: str | None = None, agent_id: str | None = None,
    ) -> m.Distilled:  # fmt: skip
        return await self._run(
            calls.distill(
                sources, prompt=prompt, statement=statement, subject=subject, user_id=user_id,
                tags=tags, kind=kind, agent_id=agent_id,
            )
        )  # fmt: skip
