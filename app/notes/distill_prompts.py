"""keepmem's distillation prompts: ``.prompt/distill/<name>`` docs seeded in
every project (``system_docs.EXTRA_DOCS``), in keep's prompt-doc shape (a
title, what the prompt is for, a ``## Prompt`` section).

``POST /v1/distill`` sends the project's doc (a project may edit it: it is a
note) to the memories' model with the numbered passages the memory is
distilled from; keepmem appends the reply format itself, so an edited doc
cannot break the reply. These texts are also the fallback for a project
that deleted its doc. Plain data: no imports, so both the notes domain
(seeding) and the distill domain (the fallback) read it.
"""

from __future__ import annotations

PREFIX = ".prompt/distill/"
TAGS = {"category": "system", "context": "prompt"}

_SHARED = (
    "Write only what the passages say: never add knowledge of your own, never guess. "
    "Every claim in the statement must be supported by at least one passage. Write "
    "sentences that stand alone (name people, places and things instead of saying he, "
    "it or this document), in the passages' language, at most 1000 characters."
)

#: name -> (title line, what it is for, the prompt)
PROMPTS: dict[str, tuple[str, str, str]] = {
    "facts": (
        "Extract facts",
        "Distils the plain facts the cited passages state into one memory.",
        "You are given numbered passages quoted from documents. Extract the facts they "
        "state: names, numbers, dates, places, definitions, what happened and what is so. "
        "Keep each fact as precise as the passage (keep units and figures). Leave out "
        "opinions, examples and repetitions. Join the facts into one memory statement, "
        "most important first.\n\n" + _SHARED,
    ),
    "patterns": (
        "Identify patterns",
        "Finds what recurs across the cited passages: repeated events, regularities, trends.",
        "You are given numbered passages quoted from documents. Identify the patterns "
        "they show together: what recurs, what regularly follows what, what grows or "
        "shrinks, what the passages have in common. A pattern needs at least two passages "
        "that show it; say how often or how widely it holds when the passages say so. "
        "Write the patterns as one memory statement.\n\n" + _SHARED,
    ),
    "insights": (
        "Summarise insights",
        "Summarises the lessons and conclusions the cited passages support.",
        "You are given numbered passages quoted from documents. Summarise the insights "
        "they support: the conclusions, lessons, causes and consequences a careful "
        "reader would take away. State each insight with the reason the passages give "
        "for it. Do not draw conclusions the passages do not support. Write the insights "
        "as one memory statement.\n\n" + _SHARED,
    ),
    "relationships": (
        "Extract relationships",
        "Extracts how the people, organisations, places and things in the cited passages "
        "relate to each other.",
        "You are given numbered passages quoted from documents. Extract the relationships "
        "they state between people, organisations, places, objects and ideas: who works "
        "for, owns, leads, belongs to, caused, preceded or depends on whom or what. Name "
        "both sides of every relationship and say when it held if the passages say so. "
        "Write the relationships as one memory statement.\n\n" + _SHARED,
    ),
    "entities": (
        "Extract entities",
        "Lists the people, organisations, places, products and works the cited passages "
        "name, with what the passages say each one is.",
        "You are given numbered passages quoted from documents. Extract the entities they "
        "name: people, organisations, places, products, works, events. For each, give its "
        "name as written and what the passages say it is (its role, kind or a defining "
        "detail). Leave out entities the passages only mention in passing. Write them as "
        "one memory statement.\n\n" + _SHARED,
    ),
    "memory": (
        "Synthesise a memory",
        "Synthesises the one thing worth remembering from the cited passages (the default "
        "prompt of POST /v1/distill).",
        "You are given numbered passages quoted from documents. Synthesise the one memory "
        "worth keeping from them: what an assistant should know later, stated plainly, "
        "with the specifics (names, numbers, dates) that make it useful. When the passages "
        "disagree, say so instead of choosing. If a memory to restate is given, keep what "
        "it says that the passages support and correct what they contradict.\n\n" + _SHARED,
    ),
}


def body(name: str) -> str:
    """The doc as seeded: its title, what it is for, and its ``## Prompt``."""
    title, purpose, prompt = PROMPTS[name]
    return (
        f"# {PREFIX}{name}\n\n"
        f'{title}. {purpose} Used by `POST /v1/distill` with `"prompt": "{name}"` when '
        "the server has a memory model (memory_llm_provider); keepmem sends the `## Prompt` "
        "section below with the numbered passages, and adds the reply format (one JSON "
        "object with the statement and its kind) itself. Edit this note to change what the "
        "model is told.\n\n"
        f"## Prompt\n\n{prompt}"
    )
