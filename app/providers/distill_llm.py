"""Distillation over hosted models: the memories' model (``memory_llm_*``,
OpenAI-compatible chat completions or Anthropic messages) writes one memory
from numbered passages.

The system prompt is the project's ``.prompt/distill/<name>`` text with the
reply format below appended here (a project's edit cannot drop it). The
reply is one JSON object, ``{"statement": "...", "kind": "fact"}``; anything
else raises ``UnusableReply`` (the caller answers 502 and stores nothing).
The call's tokens are reported with the reply, so that they can be counted
whether or not the reply is usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.providers.compression import _json_object
from app.providers.extraction import KINDS
from app.providers.http import HostedModel, OpenAIChat, anthropic_message

MAX_OUTPUT_TOKENS = 800
STATEMENT_WIDTH = 1000
REPLY_FORMAT = (
    "Reply with ONE JSON object and nothing else: "
    '{"statement": the memory, one to a few sentences that stand alone, '
    f"at most {STATEMENT_WIDTH} characters, "
    '"kind": ' + " | ".join(f'"{k}"' for k in KINDS) + "}."
)


class UnusableReply(ValueError):
    """The reply holds no JSON object with a non-empty ``statement``."""


@dataclass(frozen=True, slots=True)
class Rendered:
    """A model's reply: its text and the tokens the call cost."""

    text: str
    tokens_in: int
    tokens_out: int


@dataclass(frozen=True, slots=True)
class Distilled:
    statement: str
    kind: str | None  # None: the reply named no kind keepmem knows


def system_prompt(prompt: str) -> str:
    return f"{prompt.strip()}\n\n{REPLY_FORMAT}"


def parse_reply(text: str) -> Distilled:
    """The statement and kind of a reply (the JSON may sit in a code fence
    or prose). A statement over the width is cut at a word (prose: cutting
    it loses detail, not meaning); none at all raises ``UnusableReply``."""
    body: dict[str, Any] = _json_object(text)
    raw = body.get("statement")
    statement = " ".join(raw.split()) if isinstance(raw, str) else ""
    if not statement:
        raise UnusableReply(
            'the model\'s reply holds no JSON object with a "statement" '
            f"({len(text)} characters: {text[:120]!r})"
        )
    if len(statement) > STATEMENT_WIDTH:
        cut = statement[:STATEMENT_WIDTH]
        statement = cut.rsplit(" ", 1)[0].rstrip() or cut
    kind = body.get("kind")
    kind = kind.strip().lower() if isinstance(kind, str) else None
    return Distilled(statement, kind if kind in KINDS else None)


class Distiller(HostedModel):
    """A hosted chat model that renders distillations."""

    def __init__(self, *, max_input_chars: int = 40_000, **options: Any) -> None:
        super().__init__(max_input_chars=max_input_chars, **options)

    @staticmethod
    def input_estimate(system: str, user: str) -> int:
        """Tokens of what is sent: one per three characters (English averages
        about four), rounded up."""
        return -(-(len(system) + len(user)) // 3)

    def estimate(self, system: str, user: str) -> int:
        """Tokens a call may cost at most: the input's estimate and the most
        the reply may take."""
        return self.input_estimate(system, user) + MAX_OUTPUT_TOKENS

    async def render(self, system: str, user: str) -> Rendered:
        raise NotImplementedError


class OpenAIDistiller(Distiller):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    async def render(self, system: str, user: str) -> Rendered:
        chat = OpenAIChat(
            model=self.model, api_key=self.api_key, base_url=self.base_url, http=self._client
        )
        reply = await chat.reply(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            max_tokens=MAX_OUTPUT_TOKENS,
            temperature=0,
            response_format={"type": "json_object"},
        )
        return Rendered(reply.text, *reply.tokens(self.input_estimate(system, user)))


class AnthropicDistiller(Distiller):
    vendor = "anthropic"
    default_base = "https://api.anthropic.com"

    async def render(self, system: str, user: str) -> Rendered:
        reply = await anthropic_message(
            self._client,
            self.base_url,
            api_key=self.api_key,
            model=self.model,
            system=system,
            user=user,
            max_tokens=MAX_OUTPUT_TOKENS,
        )
        return Rendered(reply.text, *reply.tokens(self.input_estimate(system, user)))


def create(provider: str, **options: Any) -> Distiller | None:
    """The memories' model as a distiller, or None ("none": no model; the
    agent writes the statement)."""
    if provider == "none":
        return None
    kinds: dict[str, type[Distiller]] = {
        "openai": OpenAIDistiller,
        "anthropic": AnthropicDistiller,
    }
    if provider not in kinds:
        raise ValueError(f"unknown memory model {provider!r}: use none, openai or anthropic")
    return kinds[provider](**options)
