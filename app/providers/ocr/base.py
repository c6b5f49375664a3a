"""The OCR protocol and its registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.providers.registry import Registry


@dataclass(frozen=True, slots=True)
class Recognized:
    text: str
    confidence: float  # mean over the recognised lines, 0..1 (0 when nothing was found)


@runtime_checkable
class OCR(Protocol):
    name: str

    async def recognize(self, image: bytes) -> Recognized: ...


registry: Registry[OCR] = Registry("ocr")
registry.register("rapidocr", "app.providers.ocr.engines:RapidOCREngine", "rapidocr-onnxruntime")
registry.register("tesseract", "app.providers.ocr.engines:TesseractEngine", "tesseract (binary)")
