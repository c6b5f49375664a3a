"""Media description: what an image shows, in words, from an OpenAI-compatible
vision model (optional; off unless ``KEEPMEM_MEDIA_PROVIDER=openai``). The
description joins the image's OCR text, so a photo without words is found
by what it shows."""

from __future__ import annotations

import base64
from typing import Any, Protocol, runtime_checkable

from app.providers.errors import PermanentError
from app.providers.http import client, post_json
from app.providers.registry import Registry

PROMPT = (
    "Describe this image for a search index in two or three plain sentences: what it "
    "shows, any visible text, people, places and objects. No preamble."
)


@runtime_checkable
class Describer(Protocol):
    name: str

    async def describe(self, image: bytes, media_type: str) -> str: ...

    async def aclose(self) -> None: ...


class OpenAIDescriber:
    def __init__(
        self, *, model: str, api_key: str = "", base_url: str = "", timeout: float = 120.0, **_: Any
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self.name = f"openai:{model}"
        self._client = client(timeout)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def describe(self, image: bytes, media_type: str) -> str:
        data_url = f"data:{media_type};base64,{base64.b64encode(image).decode()}"
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = await post_json(
            self._client,
            f"{self.base_url}/chat/completions",
            json={
                "model": self.model,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": PROMPT},
                            {"type": "image_url", "image_url": {"url": data_url}},
                        ],
                    }
                ],
                "max_tokens": 200,
            },
            headers=headers,
            vendor="openai",
        )
        try:
            return str(body["choices"][0]["message"]["content"] or "").strip()
        except (KeyError, IndexError, TypeError) as exc:
            raise PermanentError(f"openai: unexpected response {body!r:.200}") from exc


registry: Registry[Describer] = Registry("media")
registry.register("openai", "app.providers.media.describe:OpenAIDescriber", "httpx")
