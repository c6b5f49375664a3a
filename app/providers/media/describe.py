"""Media description: what an image shows, in words, from an OpenAI-compatible
vision model (optional; off unless ``KEEPMEM_MEDIA_PROVIDER=openai``). The
description joins the image's OCR text, so a photo without words is found
by what it shows."""

from __future__ import annotations

import base64
from typing import Any, Protocol, runtime_checkable

from app.providers.http import OpenAIChat
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


class OpenAIDescriber(OpenAIChat):
    def __init__(self, *, model: str, **options: Any) -> None:
        super().__init__(model=model, **options)
        self.name = f"openai:{model}"

    async def describe(self, image: bytes, media_type: str) -> str:
        data_url = f"data:{media_type};base64,{base64.b64encode(image).decode()}"
        content = [
            {"type": "text", "text": PROMPT},
            {"type": "image_url", "image_url": {"url": data_url}},
        ]
        reply = await self.complete([{"role": "user", "content": content}], max_tokens=200)
        return reply.strip()


registry: Registry[Describer] = Registry("media")
registry.register("openai", "app.providers.media.describe:OpenAIDescriber", "httpx")
