"""LoCoMo as notes and questions, and the retrieval metrics (standard library
only: bench/keep_local.py runs in keep's own virtualenv)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

LOCOMO = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo-dev.json"


def _date(raw: str) -> str:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").isoformat()


def load() -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """(project, note) for every dialogue turn; (project, qa) for every question
    with evidence. One project per conversation."""
    data = json.loads(LOCOMO.read_text())
    notes, questions = [], []
    for conv in data:
        project = conv["sample_id"].lower()
        c = conv["conversation"]
        for key, turns in c.items():
            if not key.startswith("session_") or not isinstance(turns, list):
                continue
            when = _date(c[f"{key}_date_time"])
            for turn in turns:
                notes.append(
                    (
                        project,
                        {
                            "id": turn["dia_id"],
                            "content": f"{turn['speaker']}: {turn['text']}",
                            "tags": {"speaker": turn["speaker"], "session": key},
                            "created_at": when,
                        },
                    )
                )
        for qa in conv["qa"]:
            if qa.get("evidence"):
                questions.append((project, qa))
    return notes, questions


def metrics(found: list[str], evidence: list[str]) -> tuple[float, float, float]:
    wanted = set(evidence)
    r5 = len(wanted & set(found[:5])) / len(wanted)
    r10 = len(wanted & set(found[:10])) / len(wanted)
    dcg = sum(1 / math.log2(i + 2) for i, f in enumerate(found[:10]) if f in wanted)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), 10)))
    return r5, r10, dcg / ideal
