"""Wire schemas of distillation: sources in, a memory with its provenance out."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from app.distill.provenance import Derived, Origin
from app.distill.service import MAX_SOURCES, Distilled, DistillInput
from app.distill.sources import SourceInput
from app.grounding.schemas import CitationOut, Offset
from app.kit.ids import MAX_ID_LENGTH
from app.kit.storable import json_integer
from app.memories.schemas import Kind

PromptName = Literal["facts", "patterns", "insights", "relationships", "entities", "memory"]
CitationId = Annotated[
    str,
    Field(
        pattern=r"^cit_[A-Za-z0-9_-]{1,64}$",
        max_length=68,
        description="A stored citation's id (POST /v1/citations, or find with cite: true "
        "then POST /v1/citations).",
    ),
]
PartNumber = Annotated[StrictInt, Field(ge=1, le=10**9), BeforeValidator(json_integer)]


class SourceRef(BaseModel):
    """A passage (`note`, `part`) or a character range (`note`, `start`, `end`),
    cited on the way (the citation is stored). A passage of a note whose text
    is not kept is the source itself, with its summary and no quote."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(min_length=1, max_length=MAX_ID_LENGTH, description="The note's id.")
    part: PartNumber | None = Field(default=None, description="A passage's number (ID@P{N}).")
    start: Offset | None = Field(default=None, description="First character (0-based).")
    end: Offset | None = Field(default=None, description="One past the last character.")


class DistillIn(BaseModel):
    """Sources, and either the memory's text (`statement`) or a prompt for
    the server's memory model to write it with."""

    model_config = ConfigDict(extra="forbid")

    sources: list[CitationId | SourceRef] = Field(
        min_length=1,
        max_length=MAX_SOURCES,
        description="1-50 sources: citation ids, or passages and ranges to cite.",
    )
    prompt: PromptName = Field(
        default="memory",
        description="The project's `.prompt/distill/<prompt>` doc the model is given "
        "(with a statement: recorded in the `distilled` tag only).",
    )
    statement: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="The memory, written by the agent: stored as it is, no model is asked.",
    )
    kind: Kind | None = Field(default=None, description="Default: the model's, else fact.")
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    user_id: str | None = Field(default=None, max_length=200)
    agent_id: str | None = Field(default=None, max_length=200)
    tags: dict[str, Any] | None = None
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_LENGTH,
        description="An existing current memory (`mem/...`) to restate from these sources "
        "(a new version of it) instead of remembering a new one.",
    )

    def to_input(self) -> DistillInput:
        return DistillInput(
            sources=[
                SourceInput(citation=s)
                if isinstance(s, str)
                else SourceInput(note=s.note, part=s.part, start=s.start, end=s.end)
                for s in self.sources
            ],
            prompt=self.prompt,
            statement=self.statement,
            kind=self.kind,
            subject=self.subject,
            user_id=self.user_id,
            agent_id=self.agent_id,
            tags=self.tags,
            memory_id=self.id,
        )


class ProvenanceItem(BaseModel):
    target: str = Field(description="The derived_from edge's target: `ID@P{N}` or a note id.")
    note: str
    part: int | None
    citation: str | None = Field(description="The citation it stands on, if one was made.")
    quote: str | None = Field(description="The exact text cited; null without a citation.")
    summary: str | None = Field(
        description="The passage's summary, when there is no quote (its text is not kept)."
    )
    locator: dict[str, Any] = Field(description="page, slide, sheet or cue times, if known.")


class DistilledMemory(BaseModel):
    id: str
    statement: str
    kind: str
    subject: str
    tags: dict[str, Any] = Field(description="Its tags, `distilled` and `citations` among them.")


class DistillOut(BaseModel):
    op: Literal["add", "supersede", "update", "noop"] = Field(
        description="As POST /v1/memories: add, supersede, update (a restatement), noop "
        "(already known: it gains the provenance)."
    )
    memory: DistilledMemory
    provenance: list[ProvenanceItem]
    rendered_by: str = Field(description="`agent` (the statement was given) or the model.")
    prompt: str

    @classmethod
    def of(cls, done: Distilled) -> DistillOut:
        m = done.memory.memory
        return cls(
            op=done.op,
            memory=DistilledMemory(
                id=m.id, statement=m.statement, kind=m.kind, subject=m.subject, tags=done.tags
            ),
            provenance=[
                ProvenanceItem(
                    target=s.target,
                    note=s.note,
                    part=s.part,
                    citation=s.citation.id if s.citation else None,
                    quote=s.citation.quote if s.citation else None,
                    summary=None if s.citation else s.summary,
                    locator=s.locator,
                )
                for s in done.sources
            ],
            rendered_by=done.rendered_by,
            prompt=done.prompt,
        )


class OriginOut(BaseModel):
    target: str = Field(description="`ID@P{N}` (a passage) or a note id.")
    note: str
    part: int | None
    exists: bool = Field(description="False when the passage or note is gone since.")
    summary: str
    start: int | None = Field(description="The passage's span in its note's text.")
    end: int | None
    locator: dict[str, Any]
    citations: list[CitationOut] = Field(description="The note's citations of this target.")

    @classmethod
    def of(cls, o: Origin) -> OriginOut:
        return cls(
            target=o.target,
            note=o.note,
            part=o.part,
            exists=o.exists,
            summary=o.summary,
            start=o.span[0] if o.span else None,
            end=o.span[1] if o.span else None,
            locator=o.locator,
            citations=[CitationOut.of(c) for c in o.citations],
        )


class ProvenanceOut(BaseModel):
    id: str
    provenance: list[OriginOut]


class DerivedItem(BaseModel):
    id: str = Field(description="The derived note (a memory's id starts `mem/`).")
    statement: str
    updated_at: str
    targets: list[str] = Field(description="The passages (or the note) it was derived from.")

    @classmethod
    def of(cls, d: Derived) -> DerivedItem:
        return cls(id=d.id, statement=d.summary, updated_at=d.updated_at, targets=d.targets)


class DerivedOut(BaseModel):
    id: str
    derived: list[DerivedItem]
