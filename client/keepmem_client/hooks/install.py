"""``keepmem-hook install``: the hook configuration of each CLI, merged into
what is already there.

Files and shapes, as each host documents them:

- Claude Code: ``.claude/settings.json`` (project) or
  ``~/.claude/settings.json`` (user); ``hooks.<Event>`` is a list of matcher
  groups ``{"matcher"?, "hooks": [{"type": "command", "command", "timeout"
  (seconds), "async"?}]}``. ``async: true`` lets capture-only events run
  without holding the agent.
- Codex CLI: ``.codex/hooks.json`` or ``~/.codex/hooks.json``, the same
  shape as Claude Code's (its docs); no ``async`` is documented, so none is
  written. Older Codex versions also need ``[features] codex_hooks = true``
  in ``config.toml``, which this does not touch.
- Gemini CLI: ``.gemini/settings.json`` or ``~/.gemini/settings.json``,
  ``hooks.<Event>`` as matcher groups like Claude Code's but with the
  ``timeout`` in milliseconds (its hooks reference). Some older Gemini pages
  show a flat ``hooks.hooks`` list behind ``enableHooks`` flags; the
  reference's per-event shape is what is written.
- Kimi CLI: ``~/.kimi/config.toml``, one ``[[hooks]]`` table per entry with
  ``event``, ``command``, ``matcher``, ``timeout`` (seconds). Kimi documents
  only this user file, so ``--scope`` does not apply; ``--dir`` replaces
  the home directory. TOML is appended as text (the standard library only
  reads TOML), after checking that no entry of ours is there yet.

Our entries are recognised by their command (``... capture --platform P``):
they are replaced, never duplicated; every other key and hook is kept.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

TIMEOUT_S = 5
_CLAUDE_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "PreCompact",
    "PostCompact",
    "SessionEnd",
    "Notification",
)
_CODEX_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "PreCompact",
    "PostCompact",
)
_GEMINI_EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "PreCompress",
    "SessionEnd",
    "Notification",
)
# Kimi CLI names its hook events as Claude Code does.
_KIMI_EVENTS = _CLAUDE_EVENTS
# Where the host reads our answer; everything else is capture only.
_ANSWERING = {"SessionStart", "UserPromptSubmit", "BeforeAgent"}
_TOOL_EVENTS = {"PreToolUse", "PostToolUse", "PostToolUseFailure", "BeforeTool", "AfterTool"}


def hook_command(platform: str) -> str:
    """The command a host runs: ``keepmem-hook`` when it is on PATH, else
    this interpreter running the package (hosts do not see a venv's PATH)."""
    if shutil.which("keepmem-hook"):
        return f"keepmem-hook capture --platform {platform}"
    python = shlex.quote(sys.executable)
    return f"{python} -m keepmem_client.hooks capture --platform {platform}"


def _ours(hook: Any, platform: str) -> bool:
    return isinstance(hook, dict) and f"capture --platform {platform}" in str(
        hook.get("command", "")
    )


def target(platform: str, scope: str, base: Path | None) -> Path:
    """The configuration file to write."""
    home = base if base is not None else Path.home()
    project = base if base is not None else Path.cwd()
    root = home if scope == "user" else project
    if platform == "claude-code":
        return root / ".claude" / "settings.json"
    if platform == "codex":
        return root / ".codex" / "hooks.json"
    if platform == "gemini":
        return root / ".gemini" / "settings.json"
    return home / ".kimi" / "config.toml"


def _entry(platform: str, event: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": hook_command(platform)}
    if platform == "gemini":
        hook["name"] = "keepmem"
        hook["timeout"] = TIMEOUT_S * 1000
    else:
        hook["timeout"] = TIMEOUT_S
    if platform == "claude-code" and event not in _ANSWERING:
        hook["async"] = True
    if event not in _TOOL_EVENTS:
        return {"hooks": [hook]}
    # Gemini's tool matcher is a regex; Claude Code and Codex take "*" for all
    return {"matcher": ".*" if platform == "gemini" else "*", "hooks": [hook]}


def merge_json(existing: dict[str, Any], platform: str) -> dict[str, Any]:
    """``existing`` settings with our hooks for ``platform`` in place of any
    earlier ones of ours; nothing else changes."""
    events = {"claude-code": _CLAUDE_EVENTS, "codex": _CODEX_EVENTS, "gemini": _GEMINI_EVENTS}
    settings = dict(existing)
    hooks = settings.get("hooks")
    hooks = dict(hooks) if isinstance(hooks, dict) else {}
    for event in events[platform]:
        groups = hooks.get(event)
        kept: list[Any] = []
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                kept.append(group)
                continue
            others = [h for h in group["hooks"] if not _ours(h, platform)]
            if others:
                kept.append({**group, "hooks": others})
        kept.append(_entry(platform, event))
        hooks[event] = kept
    settings["hooks"] = hooks
    return settings


def merge_toml(existing: str, platform: str = "kimi") -> str:
    """Kimi's config text with a ``[[hooks]]`` table for each event that has
    none of ours yet (raises ValueError if the result is not valid TOML)."""
    try:
        parsed = tomllib.loads(existing)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"the existing config is not valid TOML: {exc}") from exc
    entries = parsed.get("hooks", [])
    present = (
        {h.get("event") for h in entries if _ours(h, platform)}
        if isinstance(entries, list)
        else set()
    )
    blocks = []
    for event in _KIMI_EVENTS:
        if event in present:
            continue
        blocks.append(
            "[[hooks]]\n"
            f"event = {json.dumps(event)}\n"
            f"command = {json.dumps(hook_command(platform))}\n"
            f"timeout = {TIMEOUT_S}\n"
        )
    if not blocks:
        return existing
    text = existing
    if text and not text.endswith("\n"):
        text += "\n"
    text += "\n# keepmem: coding-agent session memory (keepmem-hook install kimi)\n"
    text += "\n".join(blocks)
    tomllib.loads(text)  # an inline `hooks = [...]` elsewhere would make this invalid
    return text


def render(platform: str, path: Path) -> str:
    """The file's new text: its current content with our hooks merged in."""
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if platform == "kimi":
        return merge_toml(current)
    existing = json.loads(current) if current.strip() else {}
    if not isinstance(existing, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return json.dumps(merge_json(existing, platform), indent=2, ensure_ascii=False) + "\n"


def install(platform: str, scope: str, base: Path | None, print_only: bool) -> tuple[Path, str]:
    """Merge our hooks into the platform's config file (or only compute the
    result when ``print_only``); returns the file and its new text."""
    path = target(platform, scope, base)
    text = render(platform, path)
    if not print_only:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".keepmem-tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path, text
