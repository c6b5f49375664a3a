"""Observations from hook events, offline: rules over the events themselves.

No model runs here. What a tool call did is read from the tool's name and
input (an edit changes a file, a read or a search discovers), what failed
from errors and exit codes, what was fixed from a failure followed by a
success of the same command or on the same file. Error messages are turned
into templates (numbers, paths, hex, ids and quoted values masked) so one
error seen with different values is one pattern. Free-text "decided /
prefer / todo" phrases are only candidates (low confidence), never facts.
Open tasks come from the hosts' own todo tools and from the "Pending
Tasks" section of a compaction summary.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CHANGE_TOOLS = {
    "edit",
    "multiedit",
    "write",
    "notebookedit",
    "apply_patch",
    "write_file",
    "replace",
    "edit_file",
    "writefile",
    "strreplacefile",
    "create_file",
}
DISCOVERY_TOOLS = {
    "read",
    "grep",
    "glob",
    "ls",
    "read_file",
    "read_many_files",
    "list_directory",
    "search_file_content",
    "readfile",
    "grep_search",
    "webfetch",
    "websearch",
    "web_fetch",
    "google_web_search",
    "searchweb",
    "fetchurl",
}
SHELL_TOOLS = {"bash", "shell", "run_shell_command", "exec_command", "local_shell"}
TODO_TOOLS = {"todowrite", "update_plan", "write_todos", "settodolist", "set_todo_list"}
PATH_KEYS = ("file_path", "path", "notebook_path", "absolute_path", "filename", "file")
TEST_COMMAND = re.compile(r"\b(?:pytest|jest|vitest|go test|cargo test|npm (?:run )?test|mocha)\b")
TEST_SUMMARY = re.compile(
    r"(?:=+ )?(?:(\d+) failed)?[, ]*(?:(\d+) passed)[^\n]*"
    r"|Tests?:\s+(?:(\d+) failed, )?(\d+) passed",
    re.IGNORECASE,
)
ERROR_LINE = re.compile(
    r"^.*?\b(?:[A-Z][A-Za-z]*(?:Error|Exception)|error(?:\[[A-Z0-9]+\])?|FAILED|fatal|panic)\b.*$",
    re.MULTILINE,
)
EXIT_CODE = re.compile(r"\bexit(?:ed)?(?: with)?(?: code|status)?[: ]+([1-9]\d*)", re.IGNORECASE)
DECISION = re.compile(
    r"(?im)^[\s>*-]*(?:decision:|decided(?: to)?|we(?:'ll| will) use|let's use|going with)"
    r"\s*(.{8,200})$"
)
PREFERENCE = re.compile(
    r"(?im)\b(?:i prefer|always use|never use|please always|please never)\s+(.{4,160})"
)
TODO_PHRASE = re.compile(r"(?im)^[\s>*-]*(?:todo:|next step:|still need to)\s*(.{6,200})$")
_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{7,}\b"), "<hex>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+[\w.-]+"), "<path>"),
    (re.compile(r"\"[^\"\n]{0,80}\"|'[^'\n]{0,80}'"), "<str>"),
    (re.compile(r"\b\d+(?:\.\d+)?\b"), "<n>"),
)


@dataclass(slots=True)
class ErrorSeen:
    template: str
    example: str
    files: list[str]
    command: str

    @property
    def key(self) -> str:
        return hashlib.sha256(self.template.encode()).hexdigest()[:16]


@dataclass(slots=True)
class Digest:
    """What a run of events says, by rule."""

    changed: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    errors: list[ErrorSeen] = field(default_factory=list)
    fixes: list[ErrorSeen] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)  # candidates unless from a summary
    preferences: list[str] = field(default_factory=list)
    todos: dict[str, str] = field(default_factory=dict)  # task -> status (latest list wins)
    todo_candidates: list[str] = field(default_factory=list)
    compact_summary: str = ""
    last_message: str = ""
    compactions: int = 0
    ended: str = ""

    def facts(self) -> list[str]:
        out = []
        if self.prompts:
            out.append(f"Asked: {self.prompts[-1][:160]}")
        if self.changed:
            out.append("Changed: " + ", ".join(unique(self.changed)[:10]))
        if self.read:
            out.append("Read: " + ", ".join(unique(self.read)[:10]))
        out += [f"Failed: {e.example[:160]}" for e in self.errors[:5]]
        out += [f"Fixed: {f.example[:160]}" for f in self.fixes[:5]]
        out += [f"Tests: {t}" for t in self.tests[-2:]]
        out += [f"Decision (candidate): {d}" for d in self.decisions[:5]]
        return out

    def title(self) -> str:
        bits = []
        if self.changed:
            bits.append(f"changed {len(unique(self.changed))} file(s)")
        if self.read:
            bits.append(f"read {len(unique(self.read))}")
        if self.errors:
            bits.append(f"{len(self.errors)} failure(s)")
        if self.fixes:
            bits.append(f"{len(self.fixes)} fixed")
        if self.compactions:
            bits.append("compacted")
        return ("Session work: " + ", ".join(bits)) if bits else "Session activity"


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def template(message: str) -> str:
    """An error message with its varying parts masked: one error, one template."""
    text = " ".join(message.split())[:400]
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text


def paths_in(tool_input: Any) -> list[str]:
    """File paths a tool call names (its input's path fields, a patch's files)."""
    if isinstance(tool_input, Mapping):
        out = [str(tool_input[k]) for k in PATH_KEYS if isinstance(tool_input.get(k), str)]
        for k in ("paths", "file_paths"):
            if isinstance(tool_input.get(k), list):
                out += [str(p) for p in tool_input[k] if isinstance(p, str)]
        patch = tool_input.get("patch") or tool_input.get("input")
        if isinstance(patch, str):
            out += re.findall(r"^\*\*\* (?:Update|Add|Delete) File: (\S+)", patch, re.MULTILINE)
        return unique(out)
    return []


_FILE_IN_TEXT = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5})(?=[:\s,)'\"]|$)"
)


def paths_in_text(text: str) -> list[str]:
    """File names a command or an error message mentions (``src/a.py:12``)."""
    found = [m.group(1) for m in _FILE_IN_TEXT.finditer(text[:4000])]
    return unique(f for f in found if not re.match(r"^\d+(\.\d+)+$", f))[:10]


def command_of(tool_input: Any) -> str:
    if isinstance(tool_input, Mapping):
        cmd = tool_input.get("command") or tool_input.get("cmd")
        if isinstance(cmd, list):
            cmd = " ".join(str(c) for c in cmd)
        if isinstance(cmd, str):
            return cmd.strip()
    return ""


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        parts = [
            str(value[k])
            for k in ("stderr", "stdout", "output", "content", "error", "result", "llmContent")
            if value.get(k)
        ]
        if parts:
            return "\n".join(parts)
    return str(value)


def error_in(output: str) -> str:
    """The line of ``output`` that says what went wrong ("" when none does)."""
    lines = [m.group(0).strip() for m in ERROR_LINE.finditer(output)]
    # The last error line is usually the one that names the failure.
    return lines[-1][:400] if lines else ""


def failed(event: Mapping[str, Any]) -> bool:
    if event.get("kind") == "tool_failure" or event.get("error"):
        return True
    out = event.get("tool_output")
    if isinstance(out, Mapping):
        if out.get("is_error") or out.get("isError") or out.get("interrupted"):
            return True
        code = out.get("exit_code", out.get("exitCode", out.get("returncode")))
        if isinstance(code, int) and code != 0:
            return True
    text = text_of(out)
    return bool(EXIT_CODE.search(text[-500:])) or bool(re.search(r"\b\d+ failed\b", text))


def todos_in(tool_input: Any) -> dict[str, str]:
    """(task, status) of a host's todo-list tool call (Claude Code TodoWrite,
    Codex update_plan, Gemini write_todos, Kimi SetTodoList)."""
    if not isinstance(tool_input, Mapping):
        return {}
    items = tool_input.get("todos") or tool_input.get("plan") or tool_input.get("items") or []
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        text = (
            item.get("content") or item.get("step") or item.get("description") or item.get("title")
        )
        if isinstance(text, str) and text.strip():
            out[" ".join(text.split())[:300]] = str(item.get("status") or "pending").lower()
    return out


def section(summary: str, *names: str) -> list[str]:
    """The bullet items under a heading of a summary (e.g. "Pending Tasks")."""
    heads = "|".join(re.escape(n) for n in names)
    m = re.search(rf"(?im)^[#\s\d.*-]*(?:{heads})\s*:?\s*\**\s*$", summary)
    if m is None:
        return []
    items: list[str] = []
    for line in summary[m.end() :].splitlines():
        stripped = line.strip()
        if not stripped:
            if items:
                break
            continue
        bullet = re.match(r"^(?:[-*•]|\d+[.)]|- \[ \])\s+(.*)$", stripped)
        if bullet is None:
            break
        items.append(bullet.group(1).strip()[:300])
    return items


def decisions_in(summary: str) -> list[str]:
    found = section(summary, "Decisions", "Key decisions", "Key Decisions")
    found += [m.group(1).strip().rstrip(".") for m in DECISION.finditer(summary)]
    return unique(found)


def digest(events: Sequence[Mapping[str, Any]]) -> Digest:
    """The rule-based reading of a run of (cleaned) events, in order."""
    d = Digest()
    open_failures: dict[str, ErrorSeen] = {}  # command or file -> its last failure
    for ev in events:
        kind = ev.get("kind")
        tool = str(ev.get("tool_name") or "").lower()
        tin = ev.get("tool_input")
        files = paths_in(tin)
        cmd = command_of(tin)
        if kind == "prompt" and ev.get("prompt"):
            prompt = str(ev["prompt"])
            d.prompts.append(" ".join(prompt.split())[:300])
            d.preferences += [m.group(1).strip() for m in PREFERENCE.finditer(prompt)]
        elif kind in ("tool_result", "tool_failure"):
            if tool in TODO_TOOLS:
                d.todos = todos_in(tin) or d.todos
                continue
            if cmd:
                d.commands.append(cmd[:200])
            output = text_of(ev.get("tool_output"))
            if failed(ev):
                message = error_in(str(ev.get("error") or "")) or str(ev.get("error") or "")
                message = message or error_in(output) or f"{tool} failed"
                where = unique([*files, *paths_in_text(message), *paths_in_text(cmd)])
                seen = ErrorSeen(template(message), message[:400], where, cmd[:200])
                d.errors.append(seen)
                for k in [cmd, *files]:
                    if k:
                        open_failures[k] = seen
            else:
                for k in [cmd, *files]:
                    if k in open_failures:
                        d.fixes.append(open_failures.pop(k))
                        # One success closes every key of that failure.
                        open_failures = {
                            a: b for a, b in open_failures.items() if b is not d.fixes[-1]
                        }
                        break
                if tool in CHANGE_TOOLS:
                    d.changed += files
                elif tool in DISCOVERY_TOOLS:
                    d.read += files
            if cmd and TEST_COMMAND.search(cmd):
                summary = TEST_SUMMARY.search(output[-2000:])
                if summary:
                    d.tests.append(summary.group(0).strip(" =")[:160])
        elif kind == "stop" and ev.get("message"):
            msg = str(ev["message"])
            d.last_message = msg[:1000]
            d.decisions += [m.group(1).strip().rstrip(".") for m in DECISION.finditer(msg)]
            d.todo_candidates += [m.group(1).strip() for m in TODO_PHRASE.finditer(msg)]
        elif kind == "post_compact":
            d.compactions += 1
            if ev.get("compact_summary"):
                d.compact_summary = str(ev["compact_summary"])
        elif kind == "pre_compact":
            d.compactions += 0 if any(e.get("kind") == "post_compact" for e in events) else 1
        elif kind == "session_end":
            d.ended = str(ev.get("reason") or "ended")
    d.decisions = unique(d.decisions)
    d.preferences = unique(d.preferences)
    return d


def open_tasks(d: Digest) -> list[str]:
    """Tasks still open: the compaction summary's pending tasks, then the
    latest todo list's items not completed."""
    tasks = section(d.compact_summary, "Pending Tasks", "Open tasks", "Next steps", "TODO")
    tasks += [
        t for t, status in d.todos.items() if status not in ("completed", "done", "cancelled")
    ]
    return unique(tasks)


def done_tasks(d: Digest) -> list[str]:
    return [t for t, status in d.todos.items() if status in ("completed", "done")]


def task_key(text: str) -> str:
    """The id of a task's note: its words, case and spacing aside."""
    words = re.sub(r"[^\w]+", " ", text.casefold()).split()
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:16]
