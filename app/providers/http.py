"""Shared HTTP plumbing for hosted providers: one error mapping for all vendors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from app.providers.errors import PermanentError, TransientError


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    json: dict[str, Any],
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    vendor: str,
) -> dict[str, Any]:
    """POST and return the JSON body; map failures to transient or permanent."""
    try:
        response = await client.post(url, json=json, headers=headers, params=params)
    except (httpx.TimeoutException, httpx.TransportError) as exc:
        raise TransientError(f"{vendor}: {type(exc).__name__}: {exc}") from exc
    return _json_body(response, vendor)


async def post_form(
    client: httpx.AsyncClient,
    url: str,
    *,
    data: dict[str, Any],
    files: dict[str, tuple[str, bytes, str]],
    headers: dict[str, str] | None = None,
    vendor: str,
) -> dict[str, Any]:
    """POST multipart/form-data (a file upload) and return the JSON body,
    failures mapped as ``post_json`` maps them."""
    try:
        response = await client.post(url, data=data, files=files, headers=headers)
    except (httpx.TimeoutException, httpx.TransportError) as exc:
        raise TransientError(f"{vendor}: {type(exc).__name__}: {exc}") from exc
    return _json_body(response, vendor)


def _json_body(response: httpx.Response, vendor: str) -> dict[str, Any]:
    if response.status_code == 429 or response.status_code >= 500:
        raise TransientError(f"{vendor}: HTTP {response.status_code}: {response.text[:300]}")
    if response.status_code >= 400:
        raise PermanentError(f"{vendor}: HTTP {response.status_code}: {response.text[:300]}")
    try:
        body = response.json()
    except ValueError as exc:
        raise TransientError(f"{vendor}: response is not JSON") from exc
    if not isinstance(body, dict):
        raise PermanentError(f"{vendor}: unexpected response shape")
    return body


def client(timeout: float = 60.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))


class HostedModel:
    """What every hosted chat-model provider holds: the model, the key, the
    base URL (the vendor's by default), one HTTP client, a name for logs."""

    vendor = "llm"
    default_base = ""

    def __init__(
        self,
        *,
        model: str,
        api_key: str = "",
        base_url: str = "",
        timeout: float = 60.0,
        max_input_chars: int = 60_000,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.base_url = (base_url or self.default_base).rstrip("/")
        self.max_input_chars = max_input_chars
        self.name = f"{self.vendor}:{model}"
        self._client = http or client(timeout)

    async def aclose(self) -> None:
        await self._client.aclose()


def _count(value: Any, fallback: int) -> int:
    """A token count of a reply's ``usage``, else our estimate."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return max(fallback, 0)


@dataclass(frozen=True, slots=True)
class Reply:
    """A chat model's answer: its text and the usage block it reported."""

    text: str
    usage: dict[str, Any] = field(default_factory=dict)

    def tokens(self, input_estimate: int) -> tuple[int, int]:
        """(input, output) tokens as the vendor billed them: OpenAI's
        ``prompt_tokens`` / ``completion_tokens`` or Anthropic's
        ``input_tokens`` / ``output_tokens`` (with the prompt cache's reads
        and writes, billed too); our estimates where the reply says nothing."""
        u = self.usage
        cached = sum(
            _count(u.get(name), 0)
            for name in ("cache_creation_input_tokens", "cache_read_input_tokens")
        )
        given_in = u.get("prompt_tokens", u.get("input_tokens"))
        given_out = u.get("completion_tokens", u.get("output_tokens"))
        return (
            _count(given_in, input_estimate) + cached,
            _count(given_out, -(-len(self.text) // 4)),
        )


def _usage(body: dict[str, Any]) -> dict[str, Any]:
    usage = body.get("usage")
    return usage if isinstance(usage, dict) else {}


class OpenAIChat:
    """An OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM …):
    one client, one request shape, one reading of the reply."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str = "",
        base_url: str = "",
        timeout: float = 120.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self._client = http or client(timeout)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> str:
        """The assistant's reply text to ``messages``."""
        return (await self.reply(messages, **params)).text

    async def reply(self, messages: list[dict[str, Any]], **params: Any) -> Reply:
        """The assistant's reply to ``messages``, with the usage it reported."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = await post_json(
            self._client,
            f"{self.base_url}/chat/completions",
            json={"model": self.model, "messages": messages, **params},
            headers=headers,
            vendor="openai",
        )
        try:
            text = str(body["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as exc:
            raise PermanentError(f"openai: unexpected response {body!r:.200}") from exc
        return Reply(text, _usage(body))


async def anthropic_message(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    api_key: str,
    model: str,
    system: str,
    user: str,
    max_tokens: int,
) -> Reply:
    """One Anthropic Messages call: the text blocks of the answer and its usage."""
    body = await post_json(
        http,
        f"{base_url}/v1/messages",
        json={
            "model": model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        },
        headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"},
        vendor="anthropic",
    )
    blocks = body.get("content")
    if not isinstance(blocks, list):
        raise PermanentError(f"anthropic: unexpected response {body!r:.200}")
    text = "".join(
        str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )
    return Reply(text, _usage(body))
