"""Wire schemas of the search API: find, compact find, timeline and detail."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from app.grounding.schemas import CitationOut
from app.kit.ids import MAX_ID_LENGTH
from app.notes.schemas import NoteOut
from app.wire import MAX_OFFSET

# A question, not a document: longer ones are refused (the full-text stage
# uses at most a dozen of its words anyway).
MAX_QUERY_CHARS = 10_000


class SearchRequest(BaseModel):
    """keep's find request (daemon ``FindRequest``), plus parts/versions/bias."""

    model_config = ConfigDict(extra="ignore")

    query: str | None = Field(
        default=None,
        max_length=MAX_QUERY_CHARS,
        description=f"What to look for, in words (at most {MAX_QUERY_CHARS} characters).",
    )
    similar_to: str | None = Field(
        default=None, max_length=MAX_ID_LENGTH, description="A note id: find notes like it."
    )
    tags: dict[str, Any] | None = Field(
        default=None, description="key -> value(s); every key must match (a pre-filter)."
    )
    since: str | None = Field(
        default=None, max_length=64, description="ISO-8601 duration (P3D) or date."
    )
    until: str | None = Field(default=None, max_length=64, description="ISO-8601 duration or date.")
    scope: str | None = Field(
        default=None, max_length=MAX_ID_LENGTH, description="Id glob the results must match."
    )
    limit: int = Field(default=10, ge=1, le=100)
    include_self: StrictBool = Field(default=False, description="With similar_to: keep the anchor.")
    include_hidden: StrictBool = Field(default=False, description="Include system notes.")
    include_parts: StrictBool = Field(default=True, description="Search parts (ID@P{N}) too.")
    include_versions: StrictBool = Field(
        default=False, description="Search earlier versions (ID@V{N}) too."
    )
    bias: dict[str, float] | None = Field(
        default=None, description="{id: weight}: 0 excludes, <1 demotes, >1 boosts."
    )
    stages: Literal["hybrid", "vector", "text"] = Field(
        default="hybrid", description="hybrid, or one stage alone: vector or text."
    )
    half_life_days: float | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="Half-life of the recency bonus for this query (0 = none): the "
        "newest candidate gets the full bonus, one half-life older half of it. A bonus, "
        "not a multiplier: an old note as relevant as a new one loses only a tie. "
        "Default: the project's setting, 30 days.",
    )
    deep: StrictBool = Field(
        default=False,
        description="Also follow edges (edge tags such as speaker, extracted relations) "
        "from the top results, and return what they reach in deep_groups.",
    )
    deep_follow_depth: int = Field(default=10, ge=1, le=100, description="Hops to follow.")
    include_superseded: StrictBool = Field(
        default=False,
        description="Include notes a newer one replaced (memories tagged superseded_by).",
    )
    as_of: str | None = Field(
        default=None,
        max_length=64,
        description="ISO-8601 time: what was believed then (notes made by then; memories "
        "superseded only after it count as current).",
    )
    explain: StrictBool = Field(
        default=False,
        description="Return with each result how its score came about (stage scores, "
        "relevance, each bonus, bias). /v1/search only; compact lines carry none.",
    )
    cite: StrictBool = Field(
        default=False,
        description="Return with each result a citation (not stored): a passage's exact "
        "quote, span, context, page and the sha256 of its note's text; a short note's whole "
        "text. Needs the project to keep text (keep_text); /v1/search only.",
    )
    per_document: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="At most this many results of one document (a note and its passages): "
        "the rest of the page goes to the next documents.",
    )


class Explanation(BaseModel):
    """One result's score, stage by stage. ``score`` = min(1, (relevance +
    neighbour + episode + date + tag + recency) / scale x bias). The four
    context bonuses count only as far as the note itself matches: fully with a
    word in common with the question, else from nothing at cosine 0.1 to all
    at 0.2."""

    vector: float | None = Field(
        description="Cosine similarity to the question (or the similar_to note); "
        "null when the vector stage did not run, 0 when the note is not embedded yet."
    )
    text: float = Field(
        description="Its share of the question's words (0-1): BM25 over what a note holding "
        "each searched word once scores, or over the best BM25 of the find when higher."
    )
    bm25: float | None = Field(description="Raw BM25 score; null if full text did not find it.")
    relevance: float = Field(
        description="Fusion of the stages: 0.4 x text x min(1, vector / 0.1) + 0.6 x vector "
        "(a word in common counts as far as the note is close in meaning); one stage alone: "
        "its own score."
    )
    neighbour: float = Field(
        description="Bonus from a timeline neighbour, weighed by the evidence that the two "
        "belong together (a tag whose value neighbours share more often than chance, such as "
        "a session or thread; a tag naming the other note): 0 without such evidence."
    )
    episode: float = Field(
        description="Bonus from the best match of its episode (within an hour of it, weighed "
        "by how few candidates that window holds; or sharing a grouping tag's value)."
    )
    date: float = Field(description="Bonus: created on a date the question names.")
    tag: float = Field(
        description="Bonus: the question names one of its tag values (for a note that context "
        "lifts)."
    )
    recency: float = Field(description="Recency bonus (half-life as asked).")
    scale: float = Field(description="What the sum is divided by (a lone perfect match's sum).")
    bias: float = Field(description="The bias weight applied last (1: none).")
    context_only: bool = Field(description="No stage found it: it joined as a hit's neighbour.")


class ScoredNote(NoteOut):
    score: float = Field(
        description="How well the note answers the question, 0-1: 1 is a lone perfect match "
        "(all the words, the same meaning); a note with no word in common and a cosine below "
        "0.1 scores under 0.05 (before any bias), whatever its time or tags. Comparable within one "
        "find."
    )
    explain: Explanation | None = Field(default=None, description="With explain: true.")
    citation: CitationOut | None = Field(
        default=None, description="With cite: true (null where the text is not kept)."
    )


class DeepGroup(BaseModel):
    id: str = Field(description="The top result these notes were reached from.")
    items: list[ScoredNote] = Field(description="Closest in meaning to the query first.")


class SearchResponse(BaseModel):
    notes: list[ScoredNote]
    deep_groups: list[DeepGroup] = Field(
        default_factory=list, description="With deep: notes linked to the results."
    )
    mode: str = Field(description="hybrid, text (no vectors yet) or similar")
    pending_embedding: int = Field(
        description="Notes not yet embedded, so not yet findable by meaning."
    )
    citation_warning: str | None = Field(
        default=None, description="With cite: why some results carry no citation."
    )


class CompactRequest(SearchRequest):
    token_budget: int | None = Field(
        default=None,
        ge=1,
        le=MAX_OFFSET,
        description="Stop adding results past this many tokens (~chars/4).",
    )


class CompactLine(BaseModel):
    id: str
    score: float | None = None
    summary: str = Field(description="One line, at most 160 characters.")
    date: str = Field(description="Date of the last change, YYYY-MM-DD.")


class CompactResponse(BaseModel):
    results: list[CompactLine]
    mode: str
    pending_embedding: int
    tokens: int
    truncated: bool


class Timeline(BaseModel):
    note: CompactLine
    tags: list[str] = Field(description="The note's tags that chose the neighbours.")
    before: list[CompactLine] = Field(description="Earlier notes, oldest first.")
    after: list[CompactLine] = Field(description="Later notes, oldest first.")
    tokens: int
    truncated: bool


class DetailHead(BaseModel):
    id: str
    summary: str
    tags: dict[str, Any]


class Detail(BaseModel):
    note: DetailHead
    parts: list[CompactLine]
    versions: list[CompactLine]
    tokens: int
    truncated: bool
