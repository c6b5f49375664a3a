"""What keepmem's MCP tools return: the models their output schemas are made
from, and the results of the tools whose text is not their JSON.

Every tool answers with ``structuredContent`` checked against its
``outputSchema`` and with a text block (MCP's rule for clients that read
only text). A tool's answer is the SDK's own model where keepmem-client has
one; the answers it hands back as dicts (a note's detail, its timeline, the
graph's) are typed here, field by field as the API documents them, so that
an agent's host sees what it will get. Unknown fields are kept (a newer
server may send more), as in the SDK's models.

Two kinds of answer keep the text they always had: a list (memories,
sessions, patterns) is a JSON list in the text and an object naming it in
``structuredContent`` (whose root must be an object); a block of prose
(thread_context, resume_context) is the prose, its structured answer the
API's whole answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Sequence
from typing import Any, Literal, Protocol, TypeVar

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field, RootModel

from keepmem_client import _models as m

T = TypeVar("T")


class Call(Protocol):
    """Awaits a client call: its answer, or a tool error with keepmem's reason."""

    async def __call__(self, coro: Awaitable[T], /) -> T: ...


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Stored(RootModel[m.Note | m.Remembered]):
    """What remember stored: a memory (``op``, ``memory``, ``superseded``)
    or, with an id, a note."""

    # The MCP spec wants an object at an output schema's root.
    model_config = ConfigDict(json_schema_extra={"type": "object"})


# -- find ---------------------------------------------------------------------------


class Hit(_Out):
    """One find result: what it is, how well it answers, what it cites."""

    id: str = Field(description="The note, or a passage (ID@P{N}) or version (ID@V{N}).")
    score: float = Field(description="0-1, comparable within one find.")
    summary: str
    citation: m.Citation | None = Field(
        default=None, description="With cite (null where the project keeps no text)."
    )


class HitGroup(_Out):
    id: str = Field(description="The result these notes were reached from.")
    items: list[Hit] = Field(description="Closest in meaning to the query first.")


class Found(_Out):
    """find's answer."""

    results: list[Hit] = Field(description="Best first.")
    deep_groups: list[HitGroup] = Field(
        default_factory=list, description="With deep: notes linked to the results."
    )
    mode: str = Field(description="hybrid, text (no vectors yet) or similar.")
    pending_embedding: int = Field(
        default=0, description="Notes not yet embedded, so not yet findable by meaning."
    )
    citation_warning: str | None = Field(
        default=None, description="With cite: why some results carry no citation."
    )


def _hit(note: m.ScoredNote) -> Hit:
    return Hit(id=note.id, score=note.score, summary=note.summary, citation=note.citation)


def found(result: m.SearchResult) -> Found:
    """find's answer for an agent: each result's id, score, summary and
    citation (its tags and times are a get away)."""
    return Found(
        results=[_hit(n) for n in result.notes],
        deep_groups=[
            HitGroup(id=g.id, items=[_hit(n) for n in g.items]) for g in result.deep_groups
        ],
        mode=result.mode,
        pending_embedding=result.pending_embedding,
        citation_warning=result.citation_warning,
    )


# -- one note: its detail and its neighbours in time ----------------------------------


class DetailHead(_Out):
    id: str
    summary: str
    tags: dict[str, Any] = Field(default_factory=dict)


class Detail(_Out):
    """A note with its parts and history, within a token budget."""

    note: DetailHead
    parts: list[m.CompactLine] = Field(description="Its passages (ID@P{N}), in order.")
    versions: list[m.CompactLine] = Field(description="Its earlier versions, newest first.")
    tokens: int
    truncated: bool


class Timeline(_Out):
    """What came before and after a note in time."""

    note: m.CompactLine
    tags: list[str] = Field(description="The note's tags that chose the neighbours.")
    before: list[m.CompactLine] = Field(description="Earlier notes, oldest first.")
    after: list[m.CompactLine] = Field(description="Later notes, oldest first.")
    tokens: int
    truncated: bool


# -- the graph ------------------------------------------------------------------------


class Entity(_Out):
    key: str = Field(description="kind:name, case-folded (e.g. person:melanie ortiz).")
    name: str
    kind: str = Field(description="person, org, place, group, ...")
    notes: int = Field(description="How many notes mention it.")


class Entities(_Out):
    entities: list[Entity] = Field(description="Most-mentioned first.")


class Node(_Out):
    kind: Literal["note", "entity"]
    id: str = Field(description="A note id, or an entity key.")


class Via(Node):
    predicate: str = Field(description="The edge tag, mentions, or a relation's verb.")


class Reached(Node):
    hops: int
    via: Via = Field(description="The node it was reached from, and the link.")


class Walk(_Out):
    start: Node
    reached: list[Reached] = Field(description="Nearest first.")


class PredicateCount(_Out):
    predicate: str
    count: int


class TopicCount(_Out):
    topic: str = Field(description="A topic tag value, case-folded.")
    notes: int


class Components(_Out):
    count: int = Field(description="Connected components of the entity-relation graph.")
    largest: int = Field(description="Entities in the largest component.")
    isolated: int = Field(description="Entities no relation touches.")
    relation_pairs: int = Field(description="Distinct (subject, object) pairs read.")
    capped: bool = Field(description="True when more pairs exist than were read (limit).")
    limit: int


class GraphStats(_Out):
    """What the project's graph holds."""

    entities: int
    entities_by_kind: dict[str, int]
    mentions: int
    notes_with_mentions: int = Field(description="Notes with at least one mention.")
    relations: int
    relations_by_predicate: list[PredicateCount] = Field(description="The top 20.")
    note_edges: int = Field(description="Edges between notes (edge tags, provenance).")
    note_edges_by_predicate: list[PredicateCount]
    topics: int = Field(description="Distinct topic tag values of visible notes.")
    notes_with_topics: int
    top_topics: list[TopicCount] = Field(description="The top 10, most notes first.")
    top_entities: list[Entity] = Field(description="The top 10 by mentioning notes.")
    components: Components


# -- lists and prose ------------------------------------------------------------------


class Memories(_Out):
    memories: list[m.Memory] = Field(description="Newest first.")


class Sessions(_Out):
    sessions: list[m.Session] = Field(description="Most recent first.")


class Patterns(_Out):
    patterns: list[m.Pattern] = Field(description="Most frequent first.")


def listed(key: str, items: Sequence[BaseModel]) -> CallToolResult:
    """A list's answer: the JSON list as text (what the tool always said),
    ``{key: list}`` as its structured content."""
    dumped = [item.model_dump(mode="json") for item in items]
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(dumped, indent=2))],
        structured_content={key: dumped},
    )


def prose(text: str, answer: BaseModel) -> CallToolResult:
    """A block of prose to read as it is, with the API's answer it came from."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=answer.model_dump(mode="json"),
    )
