"""The embedding protocol and the registry of embedding providers."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from app.providers.registry import Registry


@runtime_checkable
class Embedder(Protocol):
    #: Identifier recorded with every vector, e.g. ``local:all-MiniLM-L6-v2``.
    model_id: str
    dim: int

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...

    async def aclose(self) -> None: ...


registry: Registry[Embedder] = Registry("embedding")
registry.register("local", "app.providers.embedding.minilm:MiniLMEmbedder", "onnxruntime")
registry.register("openai", "app.providers.embedding.hosted:OpenAIEmbedder", "httpx")
registry.register("voyage", "app.providers.embedding.hosted:VoyageEmbedder", "httpx")
registry.register("gemini", "app.providers.embedding.hosted:GeminiEmbedder", "httpx")
registry.register("mistral", "app.providers.embedding.hosted:MistralEmbedder", "httpx")


class QueryCache:
    """LRU of query embeddings: agents repeat their questions. Vectors are
    kept as 32-bit floats (1.5 KB for 384 dimensions, not the 12 KB of a
    list of Python floats): a full cache holds about 3 MB, not 25."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], array[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    async def get(self, embedder: Embedder, text: str) -> list[float]:
        key = (embedder.model_id, text)
        if key in self._items:
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key].tolist()
        self.misses += 1
        vector = await embedder.embed_query(text)
        self._items[key] = array("f", vector)
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return vector
