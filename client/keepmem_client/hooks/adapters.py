"""From each host's hook payload to the contract's normalised event.

Field names per host, as their hook references document them:

- Claude Code (code.claude.com/docs/en/hooks): ``session_id``, ``cwd``,
  ``tool_name`` / ``tool_input`` / ``tool_response`` / ``tool_use_id``,
  ``error`` + ``is_interrupt`` (PostToolUseFailure), ``prompt``,
  ``last_assistant_message`` (Stop, SubagentStop), ``trigger`` /
  ``custom_instructions`` (PreCompact), ``compact_summary`` (PostCompact),
  ``source`` (SessionStart), ``reason`` (SessionEnd), ``agent_id`` /
  ``agent_type``, ``message`` + ``notification_type`` (Notification).
- Codex CLI (developers.openai.com/codex/hooks and the generated schemas in
  openai/codex ``codex-rs/hooks/schema``): Claude Code's names plus
  ``turn_id`` and ``model`` on every event.
- Gemini CLI (google-gemini/gemini-cli ``docs/hooks/reference.md``): its own
  event names; ``timestamp`` on every event; AfterTool's ``tool_response``
  is ``{llmContent, returnDisplay, error?}``; AfterAgent has
  ``prompt_response``; Notification has ``message``.
- Kimi CLI (MoonshotAI/kimi-cli ``docs/en/customization/hooks.md`` and
  ``src/kimi_cli/hooks/events.py``): Claude Code's event names, but
  ``tool_output`` and ``tool_call_id``; SubagentStart/Stop carry
  ``agent_name`` and ``prompt`` / ``response``; Notification has
  ``title`` / ``body``; StopFailure has ``error_message``.

``transcript_path`` (a file on this machine) is never copied: only the
fields named below are.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

Event = dict[str, Any]

PLATFORMS = ("claude-code", "codex", "gemini", "kimi")
MAX_TEXT = 64_000
SHORT = 200
LONG_FIELDS = (
    "tool_input",
    "tool_output",
    "error",
    "prompt",
    "message",
    "compact_summary",
    "custom_instructions",
)
SHORT_FIELDS = (
    "tool_name",
    "tool_use_id",
    "trigger",
    "source",
    "reason",
    "agent_id",
    "agent_type",
    "turn_id",
    "model",
)
# The service refuses ids with whitespace or slashes (422); such an event
# could never be delivered, so it is not spooled at all.
# The ids keepmem takes as they are (its contract); any other id is sent as
# a stable digest of itself, so no host's id makes its events refused.
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+=~-]{0,199}$")

_CLAUDE_KINDS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PreToolUse": "tool_use",
    "PostToolUse": "tool_result",
    "PostToolUseFailure": "tool_failure",
    "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop",
    "Stop": "stop",
    "StopFailure": "stop",
    "PreCompact": "pre_compact",
    "PostCompact": "post_compact",
    "SessionEnd": "session_end",
    "Notification": "notification",
}
# Codex documents a subset of Claude Code's events under the same names
# (no PostToolUseFailure, SessionEnd or Notification as of its generated
# schemas); mapping the full set costs nothing if a later version adds them.
_CODEX_KINDS = dict(_CLAUDE_KINDS)
_KIMI_KINDS = dict(_CLAUDE_KINDS)
_GEMINI_KINDS = {
    "SessionStart": "session_start",
    "BeforeAgent": "prompt",
    "BeforeTool": "tool_use",
    "AfterTool": "tool_result",
    "AfterAgent": "stop",
    "PreCompress": "pre_compact",
    "SessionEnd": "session_end",
    "Notification": "notification",
}
# Notifications that only say "still waiting for you" carry nothing worth
# remembering and arrive every minute while a session sits idle.
_NOISE_NOTIFICATIONS = {"idle_prompt", "idle"}


def now_iso() -> str:
    """The current time as ISO-8601 UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def cut_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` itself when it fits, else its head and tail around a line
    saying how much was left out (the result is at most ``limit`` chars)."""
    if len(text) <= limit:
        return text
    marker_room = 80  # the marker line is well under this
    keep = max(limit - marker_room, 2)
    head, tail = keep // 2, keep - keep // 2
    end = len(text) - tail
    chars = end - head
    lines = text.count("\n", head, end)
    return f"{text[:head]}\n[... {chars} characters, {lines} lines cut ...]\n{text[end:]}"


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return []


def _lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def measure(value: Any) -> tuple[int, int]:
    """Characters and lines of the text a value holds (its string leaves)."""
    leaves = _leaves(value)
    return sum(map(len, leaves)), sum(map(_lines, leaves))


def _cut_value(value: Any, budget: Callable[[str], int]) -> Any:
    if isinstance(value, str):
        return cut_text(value, budget(value))
    if isinstance(value, Mapping):
        return {k: _cut_value(v, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_value(v, budget) for v in value]
    return value


def cut_long(value: Any, limit: int = MAX_TEXT) -> tuple[Any, bool]:
    """``value`` with its text cut to about ``limit`` chars in all, and
    whether anything was cut. Objects keep their shape: each long string
    inside gets a share of the limit in proportion to its size, so a
    ``{"stdout": <120k>, "stderr": ""}`` stays an object the server can read."""
    total, _ = measure(value)
    if total <= limit:
        return value, False

    def budget(text: str) -> int:
        return max(256, limit * len(text) // total)

    return _cut_value(value, budget), True


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _first(payload: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        value = payload.get(name)
        if value is not None:
            return value
    return None


def _at(payload: Mapping[str, Any]) -> str:
    stamp = payload.get("timestamp")
    if isinstance(stamp, str):
        try:
            datetime.fromisoformat(stamp)
            return stamp
        except ValueError:
            pass
    return now_iso()


def _normalise(platform: str, kind: str, payload: Mapping[str, Any]) -> Event | None:
    session_id = _first(payload, "session_id", "sessionId")
    if not isinstance(session_id, str) or not session_id.strip():
        return None
    if not _SESSION_ID.match(session_id):
        session_id = "h" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]
    event: Event = {"platform": platform, "session_id": session_id, "kind": kind}
    event["at"] = _at(payload)
    cwd = payload.get("cwd")
    if isinstance(cwd, str) and cwd:
        event["cwd"] = cwd[:4096]
    event["tool_name"] = _text(payload.get("tool_name"))
    tool_input = _first(payload, "tool_input", "tool_args")
    # the contract takes an object or a string here, never a list
    event["tool_input"] = tool_input if isinstance(tool_input, dict) else _text(tool_input)
    output = _first(payload, "tool_response", "tool_output", "tool_result")
    event["tool_output"] = output if isinstance(output, dict | list) else _text(output)
    event["tool_use_id"] = _text(_first(payload, "tool_use_id", "tool_call_id"))
    event["error"] = _text(_first(payload, "error", "error_message"))
    if isinstance(payload.get("is_interrupt"), bool):
        event["is_interrupt"] = payload["is_interrupt"]
    if kind in ("prompt", "subagent_start"):
        event["prompt"] = _text(payload.get("prompt"))
    event["message"] = _text(
        _first(
            payload,
            "last_assistant_message",  # Claude Code, Codex: Stop / SubagentStop
            "prompt_response",  # Gemini: AfterAgent
            "response",  # Kimi: SubagentStop
            "message",  # Claude Code, Gemini: Notification
            "body",  # Kimi: Notification
        )
    )
    for name in ("trigger", "custom_instructions", "compact_summary", "source", "reason"):
        event[name] = _text(payload.get(name))
    for name in ("agent_id", "turn_id", "model"):
        event[name] = _text(payload.get(name))
    event["agent_type"] = _text(_first(payload, "agent_type", "agent_name"))
    return _finish(event)


def _finish(event: Event) -> Event:
    out = {k: v for k, v in event.items() if v is not None and v != ""}
    for name in SHORT_FIELDS:
        if name in out:
            out[name] = out[name][:SHORT]
    for name in LONG_FIELDS:
        if name not in out:
            continue
        chars, lines = measure(out[name])
        out[name], was_cut = cut_long(out[name])
        if was_cut and name == "tool_output":
            out["original_chars"], out["original_lines"] = chars, lines
    return out


def adapt_claude_code(event_name: str, payload: Mapping[str, Any]) -> Event | None:
    """A Claude Code hook payload as an event (None: nothing to send)."""
    kind = _CLAUDE_KINDS.get(event_name)
    if kind is None:
        return None
    if kind == "notification" and payload.get("notification_type") in _NOISE_NOTIFICATIONS:
        return None
    return _normalise("claude-code", kind, payload)


def adapt_codex(event_name: str, payload: Mapping[str, Any]) -> Event | None:
    """A Codex CLI hook payload as an event (None: nothing to send)."""
    kind = _CODEX_KINDS.get(event_name)
    return None if kind is None else _normalise("codex", kind, payload)


def adapt_gemini(event_name: str, payload: Mapping[str, Any]) -> Event | None:
    """A Gemini CLI hook payload as an event (None: nothing to send).

    AfterTool is a ``tool_failure`` when its ``tool_response`` carries an
    ``error``; SessionStart's origin is documented as ``source`` (one older
    page says ``trigger``, so both are read)."""
    kind = _GEMINI_KINDS.get(event_name)
    if kind is None:
        return None
    data = dict(payload)
    response = data.get("tool_response")
    if kind == "tool_result" and isinstance(response, dict) and response.get("error"):
        kind = "tool_failure"
        err = response["error"]
        data["error"] = err.get("message", err) if isinstance(err, dict) else err
    if kind == "session_start" and "source" not in data:
        data["source"] = data.pop("trigger", None)
    return _normalise("gemini", kind, data)


def adapt_kimi(event_name: str, payload: Mapping[str, Any]) -> Event | None:
    """A Kimi CLI hook payload as an event (None: nothing to send)."""
    kind = _KIMI_KINDS.get(event_name)
    if kind is None:
        return None
    if kind == "notification" and payload.get("notification_type") in _NOISE_NOTIFICATIONS:
        return None
    data = dict(payload)
    if kind == "notification" and data.get("title") and data.get("body"):
        data["body"] = f"{data['title']}: {data['body']}"
    return _normalise("kimi", kind, data)


ADAPTERS: dict[str, Callable[[str, Mapping[str, Any]], Event | None]] = {
    "claude-code": adapt_claude_code,
    "codex": adapt_codex,
    "gemini": adapt_gemini,
    "kimi": adapt_kimi,
}


def adapt(platform: str, event_name: str, payload: Mapping[str, Any]) -> Event | None:
    """The normalised event for one hook call, or None when the host's event
    is unknown, is noise, or has no usable session id."""
    adapter = ADAPTERS.get(platform)
    return None if adapter is None else adapter(event_name, payload)
