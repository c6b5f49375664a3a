"""The MCP tools for grounding, added to ``keepmem-mcp`` and to keepmem's
own ``/mcp`` by ``mcp_proxy.build``: ingest (a URI the server fetches, or a
file), cite, verify_citation, distill and crawl (find, with citations, is
``_mcp_recall``'s).

A file is read where the server runs that can see it: the stdio proxy
reads a path on its own machine (the agent's); ``/mcp`` runs inside keepmem,
where a path would name the service's files, so it takes the content as
base64 instead (bounded by the request size limit).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keepmem_client import _models as m
from keepmem_client._mcp_outputs import Call

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from keepmem_client._client import AsyncKeepmem

Prompt = Literal["facts", "patterns", "insights", "relationships", "entities", "memory"]


class Span(BaseModel):
    """A source by place: a passage of a note, or a character range of it."""

    model_config = ConfigDict(extra="forbid")

    note: str
    part: int | None = Field(default=None, description="A passage's number (ID@P{N}).")
    start: int | None = Field(default=None, description="First character (0-based).")
    end: int | None = Field(default=None, description="One past the last character.")


class GivenCitation(BaseModel):
    """A citation as find returned it (its other fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    note: str
    start: int
    end: int
    quote: str
    text_sha256: str
    version: int = 0
    part: int | None = None


def _read(path: str) -> tuple[Path, bytes]:
    where = Path(path).expanduser()
    return where, where.read_bytes()


def add_tools(
    server: MCPServer, km: AsyncKeepmem, call: Call, tool_error: type[Exception], *, files: bool
) -> None:
    """Register the grounding tools on ``server`` (``files``: the ingest tool
    takes a local path, as the stdio proxy's does)."""

    def _tags(tags: dict[str, str] | None) -> dict[str, str] | None:
        return dict(tags) if tags else None

    if files:

        @server.tool(
            name="ingest",
            description="Store a document as a note: uri (keepmem fetches it, in the "
            "background) or path (a file on this machine: PDF, DOCX, PPTX, XLSX, SRT, VTT, "
            "HTML, text, image). Long documents are cut into passages. Without id: a URI's "
            "note is the URI, a file's is named by its content.",
        )
        async def ingest_path(
            uri: str | None = None,
            path: str | None = None,
            id: str | None = None,
            tags: dict[str, str] | None = None,
        ) -> m.Note:
            if (uri is None) == (path is None):
                raise tool_error("give one of uri or path")
            if uri is not None:
                return await call(km.put(uri=uri, id=id, tags=_tags(tags)))
            try:  # off the event loop: a file may be large, or on a slow disk
                where, data = await asyncio.to_thread(_read, path or "")
            except OSError as exc:
                raise tool_error(f"cannot read {path}: {exc.strerror or exc}") from exc
            return await call(km.upload(data, filename=where.name, id=id, tags=_tags(tags)))

    else:

        @server.tool(
            name="ingest",
            description="Store a document as a note: uri (keepmem fetches it, in the "
            "background) or content_base64 with filename (PDF, DOCX, PPTX, XLSX, SRT, VTT, "
            "HTML, text, image). Long documents are cut into passages. Without id: a URI's "
            "note is the URI, a file's is named by its content.",
        )
        async def ingest_content(
            uri: str | None = None,
            content_base64: str | None = None,
            filename: str | None = None,
            id: str | None = None,
            tags: dict[str, str] | None = None,
        ) -> m.Note:
            if (uri is None) == (content_base64 is None):
                raise tool_error("give one of uri or content_base64 (with filename)")
            if uri is not None:
                return await call(km.put(uri=uri, id=id, tags=_tags(tags)))
            if not filename:
                raise tool_error("content_base64 needs a filename (its extension names the format)")
            try:
                data = base64.b64decode(content_base64 or "", validate=True)
            except (binascii.Error, ValueError) as exc:
                raise tool_error(f"content_base64 is not base64: {exc}") from exc
            return await call(km.upload(data, filename=filename, id=id, tags=_tags(tags)))

    @server.tool(
        description="Cite a note and store the citation: a passage (part), a character range "
        "(start, end) or a quote found in its text. Needs the project to keep text."
    )
    async def cite(
        note: str,
        part: int | None = None,
        start: int | None = None,
        end: int | None = None,
        quote: str | None = None,
    ) -> m.Citation:
        return await call(km.cite(note, part=part, start=start, end=end, quote=quote))

    @server.tool(
        description="Check a citation against the note's text now: valid, changed (with a "
        "diagnosis), gone or unverifiable. id: a stored citation; citation: one find returned."
    )
    async def verify_citation(
        id: str | None = None, citation: GivenCitation | None = None
    ) -> m.CitationVerdict:
        if (id is None) == (citation is None):
            raise tool_error("give one of id or citation")
        given: Any = id if citation is None else citation.model_dump()  # checked as given
        return await call(km.verify_citation(given))

    @server.tool(
        description="Make a memory from sources (citation ids, or {note, part} / {note, "
        "start, end}) with provenance edges to them: written by keepmem's model with the "
        "distill prompt named, or statement as you wrote it."
    )
    async def distill(
        sources: list[str | Span],
        prompt: Prompt = "memory",
        statement: str | None = None,
        subject: str | None = None,
        user_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> m.Distilled:
        given = [s if isinstance(s, str) else s.model_dump(exclude_none=True) for s in sources]
        made = km.distill(
            given, prompt=prompt, statement=statement, subject=subject, user_id=user_id,
            tags=_tags(tags),
        )  # fmt: skip
        return await call(made)

    @server.tool(
        description="Crawl a site in the background: the page at uri and the same-site pages "
        "it links to, each a note (robots.txt obeyed), within max_depth, max_pages, max_bytes; "
        "path_prefix limits the links followed. Returns the first job's id."
    )
    async def crawl(
        uri: str,
        max_depth: int | None = None,
        max_pages: int | None = None,
        max_bytes: int | None = None,
        path_prefix: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> m.CrawlStarted:
        return await call(
            km.crawl(
                uri, max_depth=max_depth, max_pages=max_pages, max_bytes=max_bytes,
                tags=_tags(tags), path_prefix=path_prefix,
            )
        )  # fmt: skip
