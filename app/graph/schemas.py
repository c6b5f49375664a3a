"""Wire schemas of the graph routes: entities, a note's graph, walks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class EntityOut(BaseModel):
    key: str = Field(description="kind:name, case-folded (e.g. `person:melanie ortiz`).")
    name: str
    kind: str = Field(description="person, org, place, group, ...")


class EntityInNote(EntityOut):
    spans: list[list[int]] = Field(description="[start, end) character offsets in the note.")


class RelationOut(BaseModel):
    subject: str = Field(description="Entity key.")
    predicate: str
    object: str = Field(description="Entity key.")
    span: list[int] = Field(description="[start, end) of the sentence stating it.")


class NoteGraph(BaseModel):
    id: str
    entities: list[EntityInNote]
    relations: list[RelationOut]


class EntityListed(EntityOut):
    notes: int = Field(description="How many notes mention it.")


class EntityList(BaseModel):
    entities: list[EntityListed]


class MentioningNote(BaseModel):
    id: str
    summary: str
    mentions: int


class EntityNotes(BaseModel):
    entity: EntityOut
    notes: list[MentioningNote]


class Node(BaseModel):
    kind: Literal["note", "entity"]
    id: str


class Via(Node):
    predicate: str = Field(description="The edge tag, `mentions`, or a relation's verb.")


class Reached(Node):
    hops: int
    via: Via


class Walk(BaseModel):
    start: Node
    reached: list[Reached] = Field(description="Nearest first.")


class PredicateCount(BaseModel):
    predicate: str
    count: int


class TopicCount(BaseModel):
    topic: str = Field(description="A `topic` tag value, case-folded (the node `topic:<value>`).")
    notes: int


class Components(BaseModel):
    count: int = Field(description="Connected components of the entity-relation graph.")
    largest: int = Field(description="Entities in the largest component.")
    isolated: int = Field(description="Entities no relation touches (components of one).")
    relation_pairs: int = Field(description="Distinct (subject, object) pairs read.")
    capped: bool = Field(description="True when more pairs exist than were read (`limit`).")
    limit: int


class GraphStats(BaseModel):
    entities: int
    entities_by_kind: dict[str, int]
    mentions: int
    notes_with_mentions: int = Field(description="Notes with at least one mention.")
    relations: int
    relations_by_predicate: list[PredicateCount] = Field(description="The top 20, most first.")
    note_edges: int = Field(description="Edges between notes (edge tags, provenance).")
    note_edges_by_predicate: list[PredicateCount]
    topics: int = Field(description="Distinct `topic` tag values of visible notes.")
    notes_with_topics: int
    top_topics: list[TopicCount] = Field(description="The top 10, most notes first.")
    top_entities: list[EntityListed] = Field(description="The top 10 by mentioning notes.")
    components: Components
