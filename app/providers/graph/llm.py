"""Entities and relations from an OpenAI-compatible chat model (JSON reply)."""

from __future__ import annotations

import json
import re
from typing import Any

from app.providers.errors import PermanentError
from app.providers.graph.base import Entity, Extraction, Relation
from app.providers.http import OpenAIChat

SYSTEM = (
    "Extract the named entities (people, organisations, places, products, events, works) "
    "and the relations between them stated in the text. Reply with JSON only: "
    '{"entities": [{"name": "...", "type": "person|org|place|group|product|event|work"}], '
    '"relations": [{"subject": "...", "predicate": "snake_case_verb", "object": "..."}]}. '
    "Names exactly as written in the text."
)
KINDS = {"person", "org", "place", "group", "product", "event", "work"}


def _json_of(reply: str) -> dict[str, Any]:
    m = re.search(r"\{.*\}", reply, re.DOTALL)
    try:
        data = json.loads(m.group(0) if m else reply)
    except json.JSONDecodeError as exc:
        raise PermanentError(f"graph model replied with invalid JSON: {reply[:200]!r}") from exc
    if not isinstance(data, dict):
        raise PermanentError("graph model reply is not a JSON object")
    return data


class OpenAIGraphExtractor(OpenAIChat):
    def __init__(self, *, model: str, **options: Any) -> None:
        super().__init__(model=model, **options)
        self.name = f"openai:{model}"

    async def extract(self, text: str) -> Extraction:
        reply = await self.complete(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text[:60_000]}],
            temperature=0,
            response_format={"type": "json_object"},
        )
        data = _json_of(reply)
        out = Extraction()
        index: dict[str, int] = {}
        lowered = text.lower()
        for item in data.get("entities") or []:
            name = str(item.get("name", "")).strip() if isinstance(item, dict) else ""
            kind = str(item.get("type", "")).lower() if isinstance(item, dict) else ""
            if not name or name.lower() in index:
                continue
            start = lowered.find(name.lower())
            if start < 0:
                continue  # not in the text: the model made it up
            index[name.lower()] = len(out.entities)
            out.entities.append(
                Entity(name, kind if kind in KINDS else "thing", start, start + len(name))
            )
        for item in data.get("relations") or []:
            if not isinstance(item, dict):
                continue
            s = index.get(str(item.get("subject", "")).strip().lower())
            o = index.get(str(item.get("object", "")).strip().lower())
            predicate = re.sub(r"[^a-z0-9]+", "_", str(item.get("predicate", "")).lower()).strip(
                "_"
            )
            if s is not None and o is not None and s != o and predicate:
                a, b = out.entities[s], out.entities[o]
                out.relations.append(
                    Relation(s, predicate, o, min(a.start, b.start), max(a.end, b.end))
                )
        return out
