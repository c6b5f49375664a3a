"""The summarization protocol and its registry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from app.providers.registry import Registry

if TYPE_CHECKING:
    from app.providers.http import Reply


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
        self,
        text: str,
        *,
        max_chars: int,
        context: Sequence[RelatedNote] = (),
        system: str | None = None,
    ) -> str:
        """The note's summary line. ``system``: the project's own prompt (its
        ``.prompt/summarize/*`` doc) in place of the built-in one; offline
        summarizers have no prompt and ignore it."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ChatModel(Protocol):
    """A summarizer that is a hosted chat model: it answers any system and
    user message, so the pipeline can also ask it to classify a note
    (auto-tagging). Offline summarizers are not chat models."""

    async def generate(self, system: str, user: str, *, max_tokens: int) -> Reply: ...


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
