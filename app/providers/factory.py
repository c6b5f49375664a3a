"""Build the configured providers from Settings."""

from __future__ import annotations

from app.providers.embedding.base import Embedder
from app.providers.embedding.base import registry as embedders
from app.providers.graph.base import GraphExtractor
from app.providers.graph.base import registry as graph_extractors
from app.providers.media.describe import Describer
from app.providers.media.describe import registry as describers
from app.providers.summarization.base import Summarizer
from app.providers.summarization.base import registry as summarizers
from app.settings import Settings


def make_embedder(settings: Settings) -> Embedder:
    if settings.embedding_provider == "local":
        return embedders.create(
            "local",
            threads=settings.embedding_threads,
            batch_size=settings.embedding_batch_size,
            spin=settings.embedding_spin,
        )
    key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else ""
    return embedders.create(
        settings.embedding_provider,
        model=settings.embedding_model,
        dim=settings.embedding_dim,
        api_key=key,
        base_url=settings.embedding_base_url,
    )


def make_summarizer(settings: Settings) -> Summarizer:
    key = (
        settings.summarization_api_key.get_secret_value() if settings.summarization_api_key else ""
    )
    return summarizers.create(
        settings.summarization_provider,
        model=settings.summarization_model,
        api_key=key,
        base_url=settings.summarization_base_url,
    )


def make_describer(settings: Settings) -> Describer | None:
    if settings.media_provider == "none":
        return None
    key = settings.media_api_key.get_secret_value() if settings.media_api_key else ""
    return describers.create(
        settings.media_provider,
        model=settings.media_model,
        api_key=key,
        base_url=settings.media_base_url,
    )


def make_graph_extractor(settings: Settings) -> GraphExtractor:
    if settings.graph_provider == "openai":
        key = settings.graph_api_key.get_secret_value() if settings.graph_api_key else ""
        return graph_extractors.create(
            "openai", model=settings.graph_model, api_key=key, base_url=settings.graph_base_url
        )
    return graph_extractors.create(settings.graph_provider)
