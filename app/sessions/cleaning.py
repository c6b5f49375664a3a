"""What an event may hold once it is stored or shown to a model.

In order: the host's ``<system-reminder>`` blocks are removed (they repeat
the agent's own instructions, not what happened); the sanitiser takes out
``<private>`` spans and secrets (always, for hook events: they were not
written on purpose); a tool call that names an excluded path (``*.env*``,
``*secret*``, ``secrets/`` unless the project says otherwise) keeps its
name and path but none of its input or output; long text is kept as a head
and a tail with the original size and line count.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from app.kit import redaction
from app.sessions.observe import command_of, paths_in

DEFAULT_EXCLUDES = ("*.env*", "*secret*", "secrets/")
PREVIEW_CHARS = 4000  # per long field: 2/3 head, 1/3 tail
LONG_FIELDS = (
    "tool_input",
    "tool_output",
    "error",
    "prompt",
    "message",
    "custom_instructions",
    "compact_summary",
)
# A compaction summary is the checkpoint itself: it keeps more.
FIELD_LIMITS = {"compact_summary": 20_000, "prompt": 8000}
_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.DOTALL | re.IGNORECASE)
EXCLUDED = "[not stored: the path is excluded]"


def excluded(path: str, globs: Sequence[str]) -> bool:
    """Whether ``path`` matches one of the project's exclude globs (a glob
    ending in "/" matches a directory anywhere in the path)."""
    name = path.rsplit("/", 1)[-1]
    for glob in globs:
        if glob.endswith("/"):
            if f"/{glob}" in f"/{path}" or path.startswith(glob):
                return True
        elif fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(path, glob):
            return True
    return False


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def preview(text: str, limit: int) -> tuple[str, bool]:
    """``text``, or its head and tail with what was cut, when over ``limit``."""
    if len(text) <= limit:
        return text, False
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
    cut = len(text) - len(head) - len(tail)
    middle = f"\n[... {cut} characters, {text.count(chr(10)) + 1} lines in all; cut ...]\n"
    return head + middle + tail, True


# Secrets are matched in a margin beyond each kept window, so one that
# straddles the cut is still whole when it is replaced.
MARGIN = 2048


def clean_long(text: str, limit: int, report: redaction.Report) -> tuple[str, bool]:
    """``text`` cleaned and, when over ``limit``, cut to its head and tail.

    Spans that may run over many lines (private spans, key blocks, the
    host's reminders) are removed from the whole text first; the token
    patterns then run only over what is kept and its margins, so a
    100,000-character output costs what a 4,000-character one does."""
    text = redaction.clean_spans(_no_reminders(text), report)
    if len(text) <= limit + 2 * MARGIN:
        return preview(redaction.clean(text, report), limit)
    head_n, tail_n = limit * 2 // 3, limit // 3
    head = redaction.clean(text[: head_n + MARGIN], report)[:head_n]
    tail = redaction.clean(text[-(tail_n + MARGIN) :], report)[-tail_n:]
    cut = len(text) - head_n - tail_n
    middle = f"\n[... {cut} characters, {text.count(chr(10)) + 1} lines in all; cut ...]\n"
    return head + middle + tail, True


def _no_reminders(text: str) -> str:
    return _REMINDER.sub("", text) if "system-reminder" in text.lower() else text


def _clean_value(value: Any, report: redaction.Report) -> Any:
    if isinstance(value, str):
        return redaction.clean(_no_reminders(value), report)
    if isinstance(value, Mapping):
        return {str(k): _clean_value(v, report) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_value(v, report) for v in value]
    return value


def clean_event(event: Mapping[str, Any], *, excludes: Sequence[str]) -> dict[str, Any]:
    """The event as it may be stored: cleaned, excluded paths emptied, long
    fields cut to previews (``original_chars`` / ``original_lines`` say how
    big the tool output was)."""
    report = redaction.Report()
    out: dict[str, Any] = {}
    for name, value in event.items():
        if value is None:
            continue
        limit = FIELD_LIMITS.get(name, PREVIEW_CHARS)
        text = _as_text(value) if name in LONG_FIELDS else ""
        if len(text) > limit:
            # Kept as a preview: only its text, cleaned where it is kept.
            out[name], _ = clean_long(text, limit, report)
            if name == "tool_output":
                out.setdefault("original_chars", len(text))
                out.setdefault("original_lines", text.count("\n") + 1)
        else:
            out[name] = _clean_value(value, report)
    named = [*paths_in(out.get("tool_input")), *command_of(out.get("tool_input")).split()]
    if any(excluded(p.strip("'\"<>;|&()"), excludes) for p in named if p):
        files = paths_in(out.get("tool_input"))
        # The call is kept (it happened) with what it named, not what it read.
        cmd = command_of(out.get("tool_input"))
        out["tool_input"] = {"file_path": files[0]} if files else {"command": cmd[:500]}
        out["tool_output"] = EXCLUDED
        out["excluded"] = True
    if report.changed:
        out["redacted"] = sum(report.redacted.values()) + report.private_spans
    return out


def render(event: Mapping[str, Any]) -> tuple[str, str]:
    """(content, one-line summary) of a stored event's note."""
    kind = event["kind"]
    tool = event.get("tool_name") or ""
    tin = event.get("tool_input")
    head = {
        "prompt": "User prompt",
        "stop": "Assistant",
        "tool_result": f"Tool {tool}",
        "tool_failure": f"Tool {tool} failed",
        "subagent_stop": f"Subagent {event.get('agent_type') or ''} finished",
        "post_compact": "Context compacted",
        "pre_compact": "Compacting context",
        "session_start": "Session started",
        "session_end": "Session ended",
    }.get(kind, kind)
    lines = [head]
    if isinstance(tin, Mapping):
        shown = {k: v for k, v in tin.items() if k not in ("content", "old_string", "new_string")}
        if shown:
            lines.append("Input: " + _as_text(shown))
    elif tin:
        lines.append(f"Input: {tin}")
    for name, label in (
        ("prompt", ""),
        ("message", ""),
        ("error", "Error: "),
        ("tool_output", "Output: "),
        ("compact_summary", ""),
        ("trigger", "Trigger: "),
        ("reason", "Reason: "),
        ("source", "Source: "),
    ):
        if event.get(name):
            lines.append(label + _as_text(event[name]))
    if event.get("original_chars"):
        lines.append(
            f"(output of {event['original_chars']} characters, "
            f"{event.get('original_lines', '?')} lines; a preview is kept)"
        )
    content = "\n".join(lines)
    first = " ".join(content.replace("\n", " · ").split())
    return content, first[:200]
