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
