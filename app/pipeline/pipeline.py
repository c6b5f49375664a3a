"""What background work needs, built once per worker process: the database,
settings and the models (loaded on first use where most workers never need
them)."""

from __future__ import annotations

from dataclasses import dataclass

from app.db import Database
from app.providers.compression import Compressor
from app.providers.embedding.base import Embedder, QueryCache
from app.providers.extraction import Extractor
from app.providers.factory import make_describer, make_graph_extractor, make_transcriber
from app.providers.graph.base import GraphExtractor
from app.providers.media.describe import Describer
from app.providers.ocr.base import OCR
from app.providers.ocr.base import registry as ocr_engines
from app.providers.summarization.base import Summarizer
from app.providers.transcription.base import Transcriber
from app.settings import Settings


@dataclass
class Pipeline:
    """What background work needs, built once per worker process."""

    db: Database
    settings: Settings
    embedder: Embedder
    summarizer: Summarizer
    query_cache: QueryCache
    ocr_engine: OCR | None = None
    graph_extractor: GraphExtractor | None = None
    describer_instance: Describer | None = None
    compressor: Compressor | None = None  # sessions' model (session_llm_provider)
    extractor: Extractor | None = None  # memories' model (memory_llm_provider)
    transcriber_instance: Transcriber | None = None  # speech to text (transcription_provider)

    def describer(self) -> Describer | None:
        """The optional image describer (media_provider), loaded on first use."""
        if self.describer_instance is None:
            self.describer_instance = make_describer(self.settings)
        return self.describer_instance

    def transcriber(self) -> Transcriber | None:
        """Speech to text for audio documents (transcription_provider), made
        on first use; None when none is configured."""
        if self.transcriber_instance is None:
            self.transcriber_instance = make_transcriber(self.settings)
        return self.transcriber_instance

    def graph(self) -> GraphExtractor:
        """The entity/relation extractor, loaded on first use."""
        if self.graph_extractor is None:
            self.graph_extractor = make_graph_extractor(self.settings)
        return self.graph_extractor

    def ocr(self) -> OCR:
        """The OCR engine, loaded on first use (most workers never need it)."""
        if self.ocr_engine is None:
            self.ocr_engine = ocr_engines.create(self.settings.ocr_provider)
        return self.ocr_engine

    async def aclose(self) -> None:
        await self.embedder.aclose()
        await self.summarizer.aclose()
        if self.graph_extractor is not None:
            await self.graph_extractor.aclose()
        if self.compressor is not None:
            await self.compressor.aclose()
        if self.extractor is not None:
            await self.extractor.aclose()
        if self.transcriber_instance is not None:
            await self.transcriber_instance.aclose()
