"""LLM summarizers: OpenAI-compatible chat completions and Anthropic messages.

Both do keep's contextual summarization: related notes (sharing the note's
user tags, ranked by similarity) are given to the model as context, so the
summary says what is new or specific about this note. A project's own
``.prompt/summarize/*`` doc, when the pipeline finds one, is sent as the
system prompt in place of ``SYSTEM``; the length limit then rides in the
user message, since the project's text is sent as written. Both are chat
models too (``generate``): auto-tagging asks them to classify a note.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.providers.errors import PermanentError
from app.providers.http import HostedModel, OpenAIChat, Reply, anthropic_message
from app.providers.summarization.base import RelatedNote
from app.providers.summarization.local import cut

SYSTEM = (
    "You write the summary line of a note in an agent's memory. Reply with the summary "
    "only: plain text, no preamble, at most {max_chars} characters. Keep names, numbers, "
    "dates and decisions. When related notes are given, say what this note adds to them."
)


def prompt(text: str, context: Sequence[RelatedNote], *, limit: int | None = None) -> str:
    parts = []
    if context:
        parts.append("Related notes already in memory:")
        parts.extend(f"- [{n.id}] {n.summary}" for n in context)
        parts.append("")
    parts.append("Note to summarize:")
    parts.append(text)
    if limit is not None:
        parts.extend(["", f"(The summary line holds at most {limit} characters.)"])
    return "\n".join(parts)


class _LLM(HostedModel):
    uses_context = True

    def __init__(self, *, timeout: float = 120.0, **options: Any) -> None:
        super().__init__(timeout=timeout, **options)

    async def generate(self, system: str, user: str, *, max_tokens: int) -> Reply:
        raise NotImplementedError

    async def summarize(
        self,
        text: str,
        *,
        max_chars: int,
        context: Sequence[RelatedNote] = (),
        system: str | None = None,
    ) -> str:
        text = text[: self.max_input_chars]
        if system is None:
            system, user = SYSTEM.format(max_chars=max_chars), prompt(text, context)
        else:
            user = prompt(text, context, limit=max_chars)
        reply = (await self.generate(system, user, max_tokens=max(64, max_chars // 2))).text
        reply = reply.strip()
        if not reply:
            raise PermanentError(f"{self.vendor}: empty summary")
        return cut(reply, max_chars)


class OpenAISummarizer(_LLM):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    async def generate(self, system: str, user: str, *, max_tokens: int) -> Reply:
        chat = OpenAIChat(
            model=self.model, api_key=self.api_key, base_url=self.base_url, http=self._client
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return await chat.reply(messages, max_tokens=max_tokens, temperature=0.2)


class AnthropicSummarizer(_LLM):
    vendor = "anthropic"
    default_base = "https://api.anthropic.com"

    async def generate(self, system: str, user: str, *, max_tokens: int) -> Reply:
        return await anthropic_message(
            self._client,
            self.base_url,
            api_key=self.api_key,
            model=self.model,
            system=system,
            user=user,
            max_tokens=max_tokens,
        )
