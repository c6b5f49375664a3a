"""OCR engines. RapidOCR (PaddleOCR's models in ONNX, shipped inside the
``rapidocr-onnxruntime`` wheel) is the offline default; Tesseract, if its
binary is installed, is the option. Recognition runs on a worker thread."""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess
import threading
from typing import Any

from app.providers.errors import MissingDependency, PermanentError
from app.providers.ocr.base import Recognized

MAX_SIDE = 2500  # larger images are scaled down first: OCR time grows with area


def _rgb_array(image: bytes) -> Any:
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(image)) as source:
        rgb = source.convert("RGB")
    if max(rgb.size) > MAX_SIDE:
        rgb.thumbnail((MAX_SIDE, MAX_SIDE))
    return np.asarray(rgb)[:, :, ::-1].copy()  # BGR, as OpenCV expects


class RapidOCREngine:
    name = "rapidocr"

    def __init__(self, **_: object) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise MissingDependency("rapidocr", "rapidocr-onnxruntime", model_wheel=True) from exc
        self._engine = RapidOCR()
        self._lock = threading.Lock()  # one recognition at a time per engine

    def _run(self, image: bytes) -> Recognized:
        try:
            pixels = _rgb_array(image)
        except Exception as exc:
            raise PermanentError(f"OCR cannot read the image: {exc}") from exc
        with self._lock:
            result, _ = self._engine(pixels)
        lines = result or []
        # Reading order: top to bottom, then left to right.
        lines = sorted(lines, key=lambda r: (round(r[0][0][1] / 10), r[0][0][0]))
        text = "\n".join(str(r[1]) for r in lines)
        confidence = sum(float(r[2]) for r in lines) / len(lines) if lines else 0.0
        return Recognized(text=text, confidence=confidence)

    async def recognize(self, image: bytes) -> Recognized:
        return await asyncio.to_thread(self._run, image)


class TesseractEngine:
    name = "tesseract"

    def __init__(self, lang: str = "eng", **_: object) -> None:
        self._binary = shutil.which("tesseract")
        if self._binary is None:
            raise MissingDependency("tesseract", "tesseract-ocr (the system package)")
        self._lang = lang

    def _run(self, image: bytes) -> Recognized:
        out = subprocess.run(
            [str(self._binary), "stdin", "stdout", "-l", self._lang, "tsv"],
            input=image,
            capture_output=True,
            check=False,
            timeout=300,
        )
        if out.returncode != 0:
            raise PermanentError(f"tesseract failed: {out.stderr.decode(errors='replace')[:200]}")
        words, confidences = [], []
        lines: dict[tuple[str, str, str], list[str]] = {}
        for row in out.stdout.decode(errors="replace").splitlines()[1:]:
            cols = row.split("\t")
            if len(cols) == 12 and cols[11].strip() and float(cols[10]) >= 0:
                lines.setdefault((cols[2], cols[3], cols[4]), []).append(cols[11])
                words.append(cols[11])
                confidences.append(float(cols[10]) / 100)
        text = "\n".join(" ".join(w) for w in lines.values())
        confidence = sum(confidences) / len(confidences) if confidences else 0.0
        return Recognized(text=text, confidence=confidence)

    async def recognize(self, image: bytes) -> Recognized:
        return await asyncio.to_thread(self._run, image)
