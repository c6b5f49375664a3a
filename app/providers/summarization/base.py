"""The summarization protocol and its registry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.providers.registry import Registry


@dataclass(frozen=True, slots=True)
class RelatedNote:
    """A note passed to contextual summarization: same user tags, close in meaning."""

    id: str
    summary: str
    score: float


@runtime_checkable
class Summarizer(Protocol):
    name: str
    #: True when the summary depends on related notes (so a tag change matters).
    uses_context: bool

    async def summarize(
        self, text: str, *, max_chars: int, context: Sequence[RelatedNote] = ()
    ) -> str: ...

    async def aclose(self) -> None: ...


registry: Registry[Summarizer] = Registry("summarization")
for _name, _cls in [
    ("passthrough", "Passthrough"),
    ("truncate", "Truncate"),
    ("first_paragraph", "FirstParagraph"),
    ("extractive", "Extractive"),
]:
    registry.register(_name, f"app.providers.summarization.local:{_cls}")
registry.register("openai", "app.providers.summarization.llm:OpenAISummarizer", "httpx")
registry.register("anthropic", "app.providers.summarization.llm:AnthropicSummarizer", "httpx")
