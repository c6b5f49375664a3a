"""Session compressors: a model that condenses a coding-agent session's
events into a title, facts, a narrative, concepts and files (JSON), over
OpenAI-compatible chat completions or Anthropic messages. Each reply's
token usage is reported so the caller can hold a budget."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from app.providers.errors import PermanentError
from app.providers.http import client, post_json

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

    @classmethod
    def refused(cls) -> Compressed:
        return cls(was_refused=True)


class Compressor(Protocol):
    name: str
    max_input_chars: int

    def estimate(self, text: str) -> int:
        """Tokens a call on ``text`` may cost at most (input and output)."""
        ...

    async def compress(self, text: str) -> Compressed: ...

    async def aclose(self) -> None: ...


def _strings(value: Any, limit: int, width: int = 300) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(v)[:width] for v in value if isinstance(v, str | int | float)][:limit]


def parse_reply(reply: str, tokens_in: int, tokens_out: int) -> Compressed:
    """The model's JSON (inside a code fence or prose, if it added one);
    anything missing or malformed is left empty, never invented."""
    match = re.search(r"\{.*\}", reply, re.DOTALL)
    try:
        body = json.loads(match.group(0)) if match else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return Compressed(
        title=str(body.get("title") or "")[:200],
        facts=_strings(body.get("facts"), 12),
        narrative=str(body.get("narrative") or "")[:2000],
        concepts=_strings(body.get("concepts"), 10, 60),
        files=_strings(body.get("files"), 30, 500),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
    )


class _Chat:
    vendor = "llm"
    default_base = ""

    def __init__(
        self,
        *,
        model: str,
        api_key: str = "",
        base_url: str = "",
        timeout: float = 60.0,
        max_input_chars: int = 24_000,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.base_url = (base_url or self.default_base).rstrip("/")
        self.max_input_chars = max_input_chars
        self.name = f"{self.vendor}:{model}"
        self._client = http or client(timeout)

    def estimate(self, text: str) -> int:
        # About four characters a token for English and code, rounded up,
        # plus the most the reply may take.
        return (len(PROMPT) + len(text)) // 3 + MAX_OUTPUT_TOKENS

    async def aclose(self) -> None:
        await self._client.aclose()

    async def compress(self, text: str) -> Compressed:
        raise NotImplementedError


class OpenAICompressor(_Chat):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    async def compress(self, text: str) -> Compressed:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = await post_json(
            self._client,
            f"{self.base_url}/chat/completions",
            json={
                "model": self.model,
                "messages": [
                    {"role": "system", "content": PROMPT},
                    {"role": "user", "content": text},
                ],
                "max_tokens": MAX_OUTPUT_TOKENS,
                "temperature": 0.1,
                "response_format": {"type": "json_object"},
            },
            headers=headers,
            vendor=self.vendor,
        )
        try:
            reply = str(body["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as exc:
            raise PermanentError(f"openai: unexpected response {body!r:.200}") from exc
        usage = body.get("usage") or {}
        return parse_reply(
            reply,
            int(usage.get("prompt_tokens") or self.estimate(text) - MAX_OUTPUT_TOKENS),
            int(usage.get("completion_tokens") or len(reply) // 4),
        )


class AnthropicCompressor(_Chat):
    vendor = "anthropic"
    default_base = "https://api.anthropic.com"

    async def compress(self, text: str) -> Compressed:
        body = await post_json(
            self._client,
            f"{self.base_url}/v1/messages",
            json={
                "model": self.model,
                "max_tokens": MAX_OUTPUT_TOKENS,
                "system": PROMPT,
                "messages": [{"role": "user", "content": text}],
            },
            headers={"x-api-key": self.api_key, "anthropic-version": "2023-06-01"},
            vendor=self.vendor,
        )
        blocks = body.get("content")
        if not isinstance(blocks, list):
            raise PermanentError(f"anthropic: unexpected response {body!r:.200}")
        reply = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        usage = body.get("usage") or {}
        return parse_reply(
            reply,
            int(usage.get("input_tokens") or self.estimate(text) - MAX_OUTPUT_TOKENS),
            int(usage.get("output_tokens") or len(reply) // 4),
        )


def create(provider: str, **options: Any) -> Compressor | None:
    """The configured compressor, or None ("none": rules only)."""
    if provider == "none":
        return None
    kinds: dict[str, type[_Chat]] = {"openai": OpenAICompressor, "anthropic": AnthropicCompressor}
    if provider not in kinds:
        raise ValueError(f"unknown session compressor {provider!r}: use none, openai or anthropic")
    made: Compressor = kinds[provider](**options)
    return made
