"""The graph-extraction protocol and its registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from app.providers.registry import Registry


@dataclass(frozen=True, slots=True)
class Entity:
    name: str
    kind: str  # person, org, place, ...
    start: int  # character span in the note's text
    end: int


@dataclass(frozen=True, slots=True)
class Relation:
    subject: int  # index into Extraction.entities
    predicate: str  # e.g. works_for, met, lives_in
    object: int
    start: int  # span of the sentence it came from
    end: int


@dataclass(slots=True)
class Extraction:
    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)


@runtime_checkable
class GraphExtractor(Protocol):
    name: str

    async def extract(self, text: str) -> Extraction: ...

    async def aclose(self) -> None: ...


registry: Registry[GraphExtractor] = Registry("graph")
registry.register("spacy", "app.providers.graph.spacy_ner:SpacyExtractor", "spacy")
registry.register("openai", "app.providers.graph.llm:OpenAIGraphExtractor", "httpx")
