"""Session compressors: a model that condenses a coding-agent session's
events into a title, facts, a narrative, concepts and files (JSON), over
OpenAI-compatible chat completions or Anthropic messages. Each reply's
token usage is reported so the caller can hold a budget."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.providers.http import HostedModel, OpenAIChat, anthropic_message

PROMPT = (
    "You compress a coding agent's session log into memory. Reply with one JSON object "
    'only: {"title": str (<= 80 chars), "facts": [str] (<= 8, each one line, concrete: '
    'files, commands, errors, decisions), "narrative": str (<= 3 sentences), '
    '"concepts": [str] (<= 6 short tags), "files": [str] (paths touched)}. '
    "Never include secrets or credentials."
)
MAX_OUTPUT_TOKENS = 600


@dataclass(slots=True)
class Compressed:
    title: str = ""
    facts: list[str] = field(default_factory=list)
    narrative: str = ""
    concepts: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    was_refused: bool = False
    #: Why the model could not be used (a permanent failure: bad key, model
    #: or request); the rules' digest stands alone.
    error: str = ""

    @classmethod
    def refused(cls) -> Compressed:
        return cls(was_refused=True)

    @classmethod
    def failed(cls, reason: str) -> Compressed:
        return cls(error=reason[:300])

    @property
    def has_content(self) -> bool:
        """Whether the model said anything the observation can use."""
        return bool(self.title or self.facts or self.narrative)


class Compressor(Protocol):
    name: str
    max_input_chars: int

    def estimate(self, text: str) -> int:
        """Tokens a call on ``text`` may cost at most (input and output)."""
        ...

    async def compress(self, text: str) -> Compressed: ...

    async def aclose(self) -> None: ...


def _line(value: Any, width: int) -> str:
    """A string of the reply as one line (it becomes a fact, a title or a
    tag value); anything else is nothing."""
    if not isinstance(value, str):
        return ""
    return " ".join(value.split())[:width]


def _strings(value: Any, limit: int, width: int = 300) -> list[str]:
    # A blank value is dropped: as a tag value "" would delete the whole tag.
    if not isinstance(value, list):
        return []
    lines = (_line(v, width) for v in value)
    return list(dict.fromkeys(v for v in lines if v))[:limit]


def _json_object(reply: str) -> dict[str, Any]:
    """The first JSON object in ``reply`` (a model may wrap it in a code
    fence or prose, braces included)."""
    decoder = json.JSONDecoder()
    start = reply.find("{")
    for _ in range(20):  # brace after brace, but never without end
        if start < 0:
            break
        try:
            found, _end = decoder.raw_decode(reply, start)
        except ValueError:
            found = None
        if isinstance(found, dict):
            return found
        start = reply.find("{", start + 1)
    return {}


def parse_reply(reply: str, tokens_in: int, tokens_out: int) -> Compressed:
    """The model's JSON (inside a code fence or prose, if it added one);
    anything missing or malformed is left empty, never invented."""
    body = _json_object(reply)
    narrative = body.get("narrative")
    return Compressed(
        title=_line(body.get("title"), 200),
        facts=_strings(body.get("facts"), 12),
        narrative=narrative.strip()[:2000] if isinstance(narrative, str) else "",
        concepts=_strings(body.get("concepts"), 10, 60),
        files=_strings(body.get("files"), 30, 500),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
    )


class _Chat(HostedModel):
    def __init__(self, *, max_input_chars: int = 24_000, **options: Any) -> None:
        super().__init__(max_input_chars=max_input_chars, **options)

    def estimate(self, text: str) -> int:
        # English and code average about four characters a token; counting
        # one per three (rounded up) keeps the estimate on the safe side of
        # the budget. Plus the most the reply may take.
        return -(-(len(PROMPT) + len(text)) // 3) + MAX_OUTPUT_TOKENS

    async def compress(self, text: str) -> Compressed:
        raise NotImplementedError


class OpenAICompressor(_Chat):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    async def compress(self, text: str) -> Compressed:
        chat = OpenAIChat(
            model=self.model, api_key=self.api_key, base_url=self.base_url, http=self._client
        )
        reply = await chat.reply(
            [{"role": "system", "content": PROMPT}, {"role": "user", "content": text}],
            max_tokens=MAX_OUTPUT_TOKENS,
            temperature=0.1,
            response_format={"type": "json_object"},
        )
        return parse_reply(reply.text, *reply.tokens(self.estimate(text) - MAX_OUTPUT_TOKENS))


class AnthropicCompressor(_Chat):
    vendor = "anthropic"
    default_base = "https://api.anthropic.com"

    async def compress(self, text: str) -> Compressed:
        reply = await anthropic_message(
            self._client,
            self.base_url,
            api_key=self.api_key,
            model=self.model,
            system=PROMPT,
            user=text,
            max_tokens=MAX_OUTPUT_TOKENS,
        )
        return parse_reply(reply.text, *reply.tokens(self.estimate(text) - MAX_OUTPUT_TOKENS))


def create(provider: str, **options: Any) -> Compressor | None:
    """The configured compressor, or None ("none": rules only)."""
    if provider == "none":
        return None
    kinds: dict[str, type[_Chat]] = {"openai": OpenAICompressor, "anthropic": AnthropicCompressor}
    if provider not in kinds:
        raise ValueError(f"unknown session compressor {provider!r}: use none, openai or anthropic")
    made: Compressor = kinds[provider](**options)
    return made
