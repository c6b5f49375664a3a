"""Hosted embedding APIs, each in its own wire format.

- OpenAI-compatible (OpenAI, Ollama, vLLM, LM Studio): ``POST {base}/embeddings``
- Voyage: ``POST {base}/embeddings`` with ``input_type`` document/query
- Gemini: ``POST {base}/models/{model}:batchEmbedContents`` with task types
- Mistral: ``POST {base}/embeddings`` (OpenAI-shaped)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.providers.errors import PermanentError
from app.providers.http import client, post_json


def _by_index(body: dict[str, Any], count: int, vendor: str) -> list[list[float]]:
    data = body.get("data")
    if not isinstance(data, list) or len(data) != count:
        raise PermanentError(f"{vendor}: expected {count} embeddings, got {body!r:.200}")
    rows = sorted(data, key=lambda d: d.get("index", 0))
    return [[float(x) for x in row["embedding"]] for row in rows]


class _Hosted:
    vendor = "hosted"
    default_base = ""

    def __init__(
        self,
        *,
        model: str,
        dim: int,
        api_key: str = "",
        base_url: str = "",
        batch_size: int = 64,
        timeout: float = 60.0,
        **_: Any,
    ) -> None:
        if dim <= 0:
            raise PermanentError(f"{self.vendor}: set the embedding dimension for {model!r}")
        self.model = model
        self.dim = dim
        self.api_key = api_key
        self.base_url = (base_url or self.default_base).rstrip("/")
        self.batch_size = batch_size
        self.model_id = f"{self.vendor}:{model}"
        self._client = client(timeout)

    async def _batch(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        raise NotImplementedError

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(await self._batch(texts[start : start + self.batch_size], query=False))
        for vector in out:
            if len(vector) != self.dim:
                raise PermanentError(
                    f"{self.vendor}: {self.model} returned {len(vector)} dims, "
                    f"configured {self.dim}"
                )
        return out

    async def embed_query(self, text: str) -> list[float]:
        return (await self._batch([text], query=True))[0]

    async def aclose(self) -> None:
        await self._client.aclose()

    def _bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


class OpenAIEmbedder(_Hosted):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    async def _batch(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        body = await post_json(
            self._client,
            f"{self.base_url}/embeddings",
            json={"model": self.model, "input": list(texts)},
            headers=self._bearer(),
            vendor=self.vendor,
        )
        return _by_index(body, len(texts), self.vendor)


class MistralEmbedder(OpenAIEmbedder):
    vendor = "mistral"
    default_base = "https://api.mistral.ai/v1"


class VoyageEmbedder(_Hosted):
    vendor = "voyage"
    default_base = "https://api.voyageai.com/v1"

    async def _batch(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        body = await post_json(
            self._client,
            f"{self.base_url}/embeddings",
            json={
                "model": self.model,
                "input": list(texts),
                "input_type": "query" if query else "document",
            },
            headers=self._bearer(),
            vendor=self.vendor,
        )
        return _by_index(body, len(texts), self.vendor)


class GeminiEmbedder(_Hosted):
    vendor = "gemini"
    default_base = "https://generativelanguage.googleapis.com/v1beta"

    async def _batch(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        task = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        requests = [
            {"model": f"models/{self.model}", "content": {"parts": [{"text": t}]}, "taskType": task}
            for t in texts
        ]
        body = await post_json(
            self._client,
            f"{self.base_url}/models/{self.model}:batchEmbedContents",
            json={"requests": requests},
            headers={"x-goog-api-key": self.api_key},
            vendor=self.vendor,
        )
        embeddings = body.get("embeddings")
        if not isinstance(embeddings, list) or len(embeddings) != len(texts):
            raise PermanentError(f"gemini: expected {len(texts)} embeddings")
        return [[float(x) for x in e["values"]] for e in embeddings]
