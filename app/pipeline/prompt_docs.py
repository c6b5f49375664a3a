"""The project's own prompts: which ``.prompt/<kind>/*`` note speaks to the
model about a given note.

keep lets a memory's owner change what its model is told by editing notes,
not code: ``.prompt/summarize/*`` for summaries, ``.prompt/analyze/*`` for
analysis, ``.prompt/tag/*`` for classification. A prompt note's ``## Prompt``
section is the text sent; what comes before it may hold match rules that say
which notes it is for. The choice follows keep's (its ``_resolve_prompt_doc``),
restated here:

- A line of only ``key=value`` pairs (``type=conversation``,
  ``_content_type=text/x-python``) is a rule: it holds when the note has every
  one of those values. A doc whose rule holds ranks by the number of pairs
  (the most specific wins); a doc with rules, none holding, is not used.
- A ``scope`` tag on the doc is a glob over the note's id (``*@*`` for
  mail-like ids); more literal characters rank higher.
- A ``_when`` tag is a CEL predicate over the note (``item.tags``,
  ``item.id``, ...), evaluated as keep's state docs are; holding, it ranks
  just above a doc without rules.
- A doc without rules is a fallback; ``.prompt/<kind>/default`` is the
  fallback when there are several.

No doc (the project deleted them, or all rules miss): the provider's built-in
prompt. Only the note reading is async; the choice itself is pure.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.flows import statedoc
from app.models import Note
from app.notes import service as notes
from app.notes.views import ItemView
from app.providers.summarization.base import ChatModel, Summarizer
from app.settings import Limits
from app.tenancy import Scope

_PROMPT = re.compile(r"^##[ \t]+Prompt[ \t]*\n(.*?)(?=^##[ \t]|\Z)", re.M | re.S)
_HEADING = re.compile(r"^##[ \t]+Prompt[ \t]*$", re.M)
_PAIR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S+$")
#: Prompt docs read per kind: far more than any project writes by hand.
MAX_DOCS = 500


def prompt_section(body: str) -> str:
    """The text under a doc's ``## Prompt`` heading, up to the next ``##``."""
    found = _PROMPT.search(body)
    return found.group(1).strip() if found else ""


def rules(body: str) -> list[dict[str, str]]:
    """The doc's match rules: lines before ``## Prompt`` made only of
    ``key=value`` pairs (``key=*`` alone is a prerequisite in keep's meta
    docs, not a rule)."""
    head = _HEADING.split(body, maxsplit=1)[0]
    found: list[dict[str, str]] = []
    for line in head.splitlines():
        tokens = line.split()
        if not tokens or not all(_PAIR.match(t) for t in tokens):
            continue
        if len(tokens) == 1 and tokens[0].endswith("=*"):
            continue
        found.append(dict(t.split("=", 1) for t in tokens))
    return found


def values(tags: Mapping[str, Any], key: str) -> list[str]:
    """A tag's values as a list, whether stored as one string or several."""
    raw = tags.get(key)
    if raw is None:
        return []
    if isinstance(raw, list | tuple):
        return [str(v) for v in raw]
    return [str(raw)]


def _one(tags: Mapping[str, Any], key: str) -> str:
    found = values(tags, key)
    return found[0] if found else ""


@dataclass(frozen=True, slots=True)
class Target:
    """The note a prompt is chosen for."""

    id: str
    tags: Mapping[str, Any]
    summary: str = ""

    def item(self) -> dict[str, Any]:
        """The note as keep's ``_when`` predicates see it (``item.*``); tag
        values are lists so that ``'x' in item.tags.key`` reads naturally."""
        return {
            "item": {
                "id": self.id,
                "summary": self.summary,
                "content_length": None,
                "content_type": _one(self.tags, "_content_type"),
                "uri": _one(self.tags, "_source_uri"),
                "created": _one(self.tags, "_created"),
                "updated": _one(self.tags, "_updated"),
                "accessed": _one(self.tags, "_accessed"),
                "tags": {k: values(self.tags, k) for k in self.tags},
            }
        }


def when_holds(source: str, target: Target) -> bool:
    """A ``_when`` predicate: false when it does not compile or evaluate."""
    try:
        return statedoc.holds(source, target.item())
    except statedoc.StateDocError:
        return False


def _rank(doc: ItemView, kind: str, target: Target) -> tuple[int, int] | None:
    """How well the doc fits the note (higher is better), None if it does not."""
    is_default = int(doc.id == f".prompt/{kind}/default")
    when = _one(doc.tags, "_when")
    if when and not when_holds(when, target):
        return None
    scope = _one(doc.tags, "scope")
    if scope:
        if not fnmatch.fnmatchcase(target.id, scope):
            return None
        return len(scope.replace("*", "").replace("?", "")), 0
    if when:
        return 1, 0
    found = rules(doc.summary)
    if not found:
        return 0, is_default
    sizes = [
        len(rule) for rule in found if all(v in values(target.tags, k) for k, v in rule.items())
    ]
    return (max(sizes), 0) if sizes else None


def choose(docs: Sequence[ItemView], kind: str, target: Target) -> ItemView | None:
    """The best-fitting doc with a ``## Prompt`` section, or None."""
    best: tuple[tuple[int, int], ItemView] | None = None
    for doc in sorted(docs, key=lambda d: d.id):
        if not prompt_section(doc.summary):
            continue
        rank = _rank(doc, kind, target)
        if rank is not None and (best is None or rank > best[0]):
            best = (rank, doc)
    return best[1] if best else None


async def docs_of(session: AsyncSession, scope: Scope, kind: str) -> list[ItemView]:
    """The project's ``.prompt/<kind>/*`` notes."""
    query = notes.ListInput(
        prefix=f".prompt/{kind}/", include_hidden=True, order_by="id", limit=MAX_DOCS
    )
    found = await notes.list_notes(session, scope, query=query, limits=Limits())
    return found.items


@dataclass(frozen=True, slots=True)
class Chosen:
    """The prompt to send and the doc it came from (for the job's result)."""

    doc_id: str
    text: str


async def for_note(session: AsyncSession, scope: Scope, kind: str, target: Target) -> Chosen | None:
    """The project's prompt of ``kind`` for the note, or None (built-in)."""
    doc = choose(await docs_of(session, scope, kind), kind, target)
    return Chosen(doc.id, prompt_section(doc.summary)) if doc is not None else None


async def for_model(
    session: AsyncSession, scope: Scope, model: Summarizer, kind: str, note: Note
) -> Chosen | None:
    """The project's prompt of ``kind`` for the note when the model is a
    chat model (offline summarizers take no prompt: nothing is read)."""
    if not isinstance(model, ChatModel):
        return None
    return await for_note(session, scope, kind, Target(note.id, note.tags, note.summary))
