"""Wire schemas of grounding: citations, their verdicts, re-chunking."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from app.grounding.citations import (
    DEFAULT_CONTEXT,
    MAX_CONTEXT,
    MAX_QUOTE_CHARS,
    CitationView,
    Verdict,
)
from app.grounding.passages import RECHUNK_BATCH
from app.kit.ids import MAX_ID_LENGTH
from app.kit.storable import json_integer

Offset = Annotated[StrictInt, Field(ge=0, le=2**31 - 1), BeforeValidator(json_integer)]


class CiteIn(BaseModel):
    """What to cite: a passage (``part``), a character range (``start``,
    ``end``) or a ``quote`` (found in the text; with a range, checked
    against it)."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(max_length=MAX_ID_LENGTH, description="The note's id.")
    part: Annotated[StrictInt, Field(ge=1, le=10**9), BeforeValidator(json_integer)] | None = Field(
        default=None, description="A passage's number (ID@P{N})."
    )
    start: Offset | None = Field(default=None, description="First character (0-based).")
    end: Offset | None = Field(default=None, description="One past the last character.")
    quote: str | None = Field(
        default=None,
        max_length=MAX_QUOTE_CHARS,
        description="The exact text cited: located in the note, or checked at start..end.",
    )
    context_chars: Annotated[
        StrictInt, Field(ge=0, le=MAX_CONTEXT), BeforeValidator(json_integer)
    ] = Field(default=DEFAULT_CONTEXT, description="Characters of context kept on each side.")


class CitationOut(BaseModel):
    id: str
    note: str = Field(description="The cited note's id.")
    version: int = Field(description="The note's version cited (keep's numbering, oldest 1).")
    part: int | None = Field(description="The passage cited, when a passage was.")
    start: int = Field(description="First character of the quote in the note's text.")
    end: int = Field(description="One past its last character.")
    quote: str = Field(description="The exact text cited.")
    before: str = Field(description="Text just before the quote.")
    after: str = Field(description="Text just after it.")
    text_sha256: str = Field(description="sha256 of the note's whole normalised text then.")
    source_uri: str | None = Field(description="Where the document came from, if fetched.")
    locator: dict[str, Any] = Field(
        description="page (page_end), slide (slide_end), sheet, start_s / end_s of the span."
    )
    created_at: str | None = Field(description="When it was stored; null when not stored.")
    stored: bool = Field(description="False for a find's citation (POST /v1/citations stores).")

    @classmethod
    def of(cls, view: CitationView) -> CitationOut:
        return cls(**dataclasses.asdict(view))


class CitationList(BaseModel):
    citations: list[CitationOut]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor` for more.")


class CitationCheck(BaseModel):
    """A citation to verify as given (one a find returned, not stored)."""

    model_config = ConfigDict(extra="ignore")

    note: str = Field(max_length=MAX_ID_LENGTH)
    start: Offset
    end: Offset
    quote: str = Field(max_length=MAX_QUOTE_CHARS)
    text_sha256: str = Field(max_length=64)
    version: Annotated[StrictInt, Field(ge=0, le=2**31 - 1), BeforeValidator(json_integer)] = 0
    part: Annotated[StrictInt, Field(ge=1, le=10**9), BeforeValidator(json_integer)] | None = None


class VerifyOut(BaseModel):
    status: Literal["valid", "changed", "gone", "unverifiable"] = Field(
        description="valid: the text is the one cited; changed: it is not (see diagnosis); "
        "gone: the note was deleted; unverifiable: its project does not keep text."
    )
    diagnosis: str
    quote_in_place: bool = Field(description="The quote is still at its span.")
    found_at: list[int] | None = Field(
        description="[start, end] of the quote in the current text, if it is there."
    )
    current_sha256: str | None
    current_version: int | None
    citation: CitationOut

    @classmethod
    def of(cls, verdict: Verdict) -> VerifyOut:
        return cls(
            status=verdict.status,
            diagnosis=verdict.diagnosis,
            quote_in_place=verdict.quote_in_place,
            found_at=list(verdict.found_at) if verdict.found_at else None,
            current_sha256=verdict.current_sha256,
            current_version=verdict.current_version,
            citation=CitationOut.of(verdict.citation),
        )


class RechunkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    after: str = Field(default="", max_length=MAX_ID_LENGTH, description="Resume after this id.")
    limit: Annotated[StrictInt, Field(ge=1, le=1000), BeforeValidator(json_integer)] = Field(
        default=RECHUNK_BATCH, description="Notes looked at in this call."
    )


class RechunkOut(BaseModel):
    queued: int = Field(description="Chunk jobs queued.")
    without_text: int = Field(
        description="Long notes skipped: their content is no longer held and their text "
        "is not kept (put them again to cut them)."
    )
    next_after: str | None = Field(description="Call again with this as `after`; null: done.")
