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


# A long note's text is read a window at a time (each window within what an
# extractor reads, cut at a paragraph or sentence end), so a 300-page
# document gets entities from every page, not its first hundred thousand
# characters; spans are shifted back into the note's text.
WINDOW_CHARS = 50_000


def windows(text: str, size: int = WINDOW_CHARS) -> list[tuple[int, int]]:
    """[start, end) stretches of at most ``size`` characters covering ``text``."""
    out, start = [], 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            for mark in ("\n\n", "\n", ". "):
                cut = text.rfind(mark, start + size // 2, end)
                if cut > 0:
                    end = cut + len(mark)
                    break
        out.append((start, end))
        start = end
    return out


def merged(found: list[tuple[int, Extraction]]) -> Extraction:
    """One extraction of several windows' (offset, extraction)."""
    out = Extraction()
    for offset, part in found:
        base = len(out.entities)
        out.entities += [
            Entity(e.name, e.kind, e.start + offset, e.end + offset) for e in part.entities
        ]
        out.relations += [
            Relation(
                r.subject + base, r.predicate, r.object + base, r.start + offset, r.end + offset
            )
            for r in part.relations
        ]
    return out


async def extract_all(extractor: GraphExtractor, text: str) -> Extraction:
    """Entities and relations of the whole text, window by window."""
    spans = windows(text)
    if len(spans) <= 1:
        return await extractor.extract(text)
    return merged([(a, await extractor.extract(text[a:b])) for a, b in spans])
