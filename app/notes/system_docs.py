"""System notes seeded into every new project.

keep keeps its schema as data: tag behaviour, the working-context template,
meta sections and agent prompts are ordinary notes whose ids start with a
dot. These texts are keepmem's own. They are hidden from list and find unless
``include_hidden`` is asked for, and a project may edit them like any note.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SystemDoc:
    id: str
    body: str
    tags: dict[str, str] = field(default_factory=dict)


NOW_TEMPLATE = """# Now

What I am working on, what I just learned, and what comes next.
Replace this text with the current state of the work."""


def _edge(key: str, inverse: str, what: str) -> SystemDoc:
    return SystemDoc(
        f".tag/{key}",
        f"Edge tag `{key}`: the value names another note ({what}). "
        f"That note lists this one under `{inverse}`.",
        {"_inverse": inverse},
    )


def _constrained(key: str, values: dict[str, str], about: str) -> list[SystemDoc]:
    docs = [
        SystemDoc(
            f".tag/{key}",
            f"Tag `{key}`: {about} One value at a time; allowed values: " + ", ".join(values) + ".",
            {"_constrained": "true", "_singular": "true"},
        )
    ]
    docs.extend(SystemDoc(f".tag/{key}/{value}", text) for value, text in values.items())
    return docs


SYSTEM_DOCS: tuple[SystemDoc, ...] = (
    SystemDoc(".now", NOW_TEMPLATE),
    SystemDoc(
        ".tag/topic",
        "Tag `topic`: what a note is about, in a word or two. Several values are fine.",
    ),
    SystemDoc(".tag/project", "Tag `project`: the piece of work a note belongs to."),
    SystemDoc(".tag/kind", "Tag `kind`: the form of a note: reference, decision, meeting, idea …"),
    SystemDoc(".tag/type", "Tag `type`: a finer classification chosen by the agent or user."),
    _edge("speaker", "said", "who said it"),
    _edge("references", "referenced_by", "a source this note points at"),
    _edge("author", "wrote", "who wrote it"),
    _edge("in-reply-to", "replies", "the message this one answers"),
    *_constrained(
        "act",
        {
            "commitment": "Someone promised to do something.",
            "request": "Someone asked for something to be done.",
            "offer": "Someone offered to do something if wanted.",
            "assertion": "A claim about how things are.",
            "assessment": "A judgement of value or quality.",
            "declaration": "A statement that makes something so by saying it.",
        },
        "the speech act a note records.",
    ),
    *_constrained(
        "status",
        {
            "open": "Still to be done.",
            "blocked": "Waiting on something else.",
            "fulfilled": "Done as promised.",
            "declined": "Turned down.",
            "withdrawn": "Taken back by whoever made it.",
            "renegotiated": "Replaced by a changed agreement.",
        },
        "where a commitment or request stands.",
    ),
    SystemDoc(
        ".meta/todo",
        "Open loops: notes tagged act=commitment or act=request whose status is open, "
        "closest to the note in view first.",
    ),
    SystemDoc(
        ".meta/learnings",
        "Lessons recorded earlier (type=learning) that bear on the note in view.",
    ),
    SystemDoc(
        ".prompt/agent/reflect",
        "# Reflect\n\nReflect on current actions, commitments, and intentions.\n\n"
        "## Prompt\n\nHere is what is in view now:\n\n{get}\n\nRelated notes:\n\n{find}\n\n"
        "What has changed, what is still open, and what should be written down? {text}",
        {"mcp_prompt": "text,id,since,token_budget"},
    ),
    SystemDoc(
        ".prompt/agent/query",
        "# Query\n\nAnswer a question from memory.\n\n## Prompt\n\n"
        "Question: {text}\n\nNotes that may answer it:\n\n{find}\n\n"
        "Answer from these notes; say which ones, and say so if they do not answer it.",
        {"mcp_prompt": "text,since,token_budget"},
    ),
    SystemDoc(
        ".prompt/agent/session-start",
        "# Session start\n\nPick up where the last session left off.\n\n## Prompt\n\n"
        "Current working context:\n\n{get}\n\nRecent notes:\n\n{find}",
    ),
)
