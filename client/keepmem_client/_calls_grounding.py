"""Grounding calls, described once: citations of passages and spans,
re-cutting long notes, same-site crawls and distilling memories from
sources (``Grounding`` and ``AsyncGrounding`` send them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote as quoted

from keepmem_client import _models as m
from keepmem_client._base import Call, clean
from keepmem_client._calls import Tags


def _citation_path(citation_id: str, suffix: str = "") -> str:
    return f"/v1/citations/{quoted(citation_id, safe='')}{suffix}"


def cite(
    note: str, *, part: int | None = None, start: int | None = None, end: int | None = None,
    quote: str | None = None, context_chars: int | None = None,
) -> Call[m.Citation]:  # fmt: skip
    # Citing the same span of the same text again returns the stored one:
    # safe to repeat.
    body = clean({"note": note, "part": part, "start": start, "end": end, "quote": quote,
                  "context_chars": context_chars})  # fmt: skip
    return Call("POST", "/v1/citations", m.Citation.model_validate, json=body, idempotent=True)


def citation(citation_id: str) -> Call[m.Citation]:
    return Call("GET", _citation_path(citation_id), m.Citation.model_validate, idempotent=True)


def citations(
    *, note: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Call[m.CitationPage]:
    params = clean({"note": note, "limit": limit, "cursor": cursor})
    return Call(
        "GET", "/v1/citations", m.CitationPage.model_validate, params=params, idempotent=True
    )


def delete_citation(citation_id: str) -> Call[dict[str, Any]]:
    return Call("DELETE", _citation_path(citation_id), dict)


# What POST /v1/citations/verify checks of a citation given whole.
CHECKED = ("note", "start", "end", "quote", "text_sha256", "version", "part")


def verify_citation(citation: str | m.Citation | Mapping[str, Any]) -> Call[m.CitationVerdict]:
    """A stored citation by its id; one not stored (a find's) as given."""
    read = m.CitationVerdict.model_validate
    if isinstance(citation, str):
        return Call("POST", _citation_path(citation, "/verify"), read, idempotent=True)
    given = citation.model_dump() if isinstance(citation, m.Citation) else dict(citation)
    if given.get("stored", True) and given.get("id"):
        return Call("POST", _citation_path(given["id"], "/verify"), read, idempotent=True)
    body = clean({k: given.get(k) for k in CHECKED})
    return Call("POST", "/v1/citations/verify", read, json=body, idempotent=True)


def open_citation(citation_id: str, *, format: str = "text") -> Call[str]:
    # Text or HTML with the quote marked: the client reads the answer as text.
    params = {"format": format}
    return Call("GET", _citation_path(citation_id, "/open"), str, params=params, idempotent=True)


def rechunk(*, after: str | None = None, limit: int | None = None) -> Call[m.RechunkResult]:
    body = clean({"after": after, "limit": limit})
    return Call("POST", "/v1/passages/rechunk", m.RechunkResult.model_validate, json=body)


def crawl(
    uri: str, *, max_depth: int | None = None, max_pages: int | None = None,
    max_bytes: int | None = None, tags: Mapping[str, str] | None = None,
    path_prefix: str | None = None,
) -> Call[m.CrawlStarted]:  # fmt: skip
    body = clean(
        {"uri": uri, "max_depth": max_depth, "max_pages": max_pages, "max_bytes": max_bytes,
         "tags": dict(tags) if tags is not None else None, "path_prefix": path_prefix}
    )  # fmt: skip
    return Call("POST", "/v1/crawl", m.CrawlStarted.model_validate, json=body)


Source = str | m.Citation | Mapping[str, Any]


def _source(source: Source) -> Any:
    """A citation id, a Citation (its id when stored, else its note and
    span), or a ``{"note", "part"}`` / ``{"note", "start", "end"}`` dict."""
    if isinstance(source, str):
        return source
    if isinstance(source, m.Citation):
        if source.stored and source.id:
            return source.id
        return {"note": source.note, "start": source.start, "end": source.end}
    return dict(source)


def distill(
    sources: Sequence[Source], *, prompt: str = "memory", statement: str | None = None,
    subject: str | None = None, user_id: str | None = None, tags: Tags | None = None,
    kind: str | None = None, agent_id: str | None = None,
) -> Call[m.Distilled]:  # fmt: skip
    # Not idempotent: a model may word a second rendering differently.
    body = clean(
        {"sources": [_source(s) for s in sources], "prompt": prompt, "statement": statement,
         "subject": subject, "user_id": user_id, "tags": dict(tags) if tags is not None else None,
         "kind": kind, "agent_id": agent_id}
    )  # fmt: skip
    return Call("POST", "/v1/distill", m.Distilled.model_validate, json=body)
