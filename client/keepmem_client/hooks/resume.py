"""The "where you left off" context: when to ask for it, how to ask, and
how each host wants it handed back.

Hosts read injected context only at some events: Claude Code and Codex at
SessionStart and UserPromptSubmit (``hookSpecificOutput.additionalContext``),
Gemini CLI at SessionStart and BeforeAgent (the same field; its reference
documents ``hookSpecificOutput.additionalContext`` for both), Kimi CLI only
from UserPromptSubmit's stdout (it discards SessionStart's output, so Kimi
gets plain text on the first prompt).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from keepmem_client.hooks.env import HookEnv, headers

DEADLINE = 1.5
OFF_MARKER = "[keepmem:off]"

# Host event names whose output the host reads as context, per platform.
_INJECT_EVENTS = {
    "claude-code": {"SessionStart": "session_start", "UserPromptSubmit": "prompt"},
    "codex": {"SessionStart": "session_start", "UserPromptSubmit": "prompt"},
    "gemini": {"SessionStart": "session_start", "BeforeAgent": "prompt"},
    "kimi": {"UserPromptSubmit": "prompt"},
}


def _state_path(spool_dir: Path, session_id: str) -> Path:
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]
    return spool_dir / "state" / f"{digest}.json"


def load_state(spool_dir: Path, session_id: str) -> dict[str, Any]:
    """The session's injection state: ``injected`` and ``compacted`` (a
    compaction happened since the last injection)."""
    try:
        data = json.loads(_state_path(spool_dir, session_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_state(spool_dir: Path, session_id: str, state: dict[str, Any]) -> None:
    """Write the state whole (temp file + rename: a reader never sees half)."""
    path = _state_path(spool_dir, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    tmp.replace(path)


def note_event(spool_dir: Path, event: dict[str, Any]) -> None:
    """Remember a compaction, so the next prompt gets the context again."""
    if event["kind"] in ("pre_compact", "post_compact"):
        state = load_state(spool_dir, event["session_id"])
        state["compacted"] = True
        save_state(spool_dir, event["session_id"], state)


def wants_context(platform: str, event_name: str, event: dict[str, Any], spool_dir: Path) -> bool:
    """Whether this hook call should answer with the context: always at a
    session start the host reads, else on the session's first prompt and
    the first prompt after a compaction."""
    kind = _INJECT_EVENTS.get(platform, {}).get(event_name)
    if kind is None or kind != event["kind"]:
        return False
    if kind == "session_start":
        return True
    if OFF_MARKER in (event.get("prompt") or ""):
        return False
    state = load_state(spool_dir, event["session_id"])
    return not state.get("injected") or bool(state.get("compacted"))


def mark_injected(spool_dir: Path, session_id: str) -> None:
    """Record that this session had its context (asked for, whatever came
    back: a keepmem that is down is not asked again on every prompt)."""
    save_state(spool_dir, session_id, {"injected": True, "compacted": False, "at": time.time()})


def fetch_context(env: HookEnv, event: dict[str, Any], deadline: float = DEADLINE) -> str:
    """GET /v1/sessions/resume within ``deadline`` seconds in all; "" on
    any failure, on ``inject: false`` or on an empty context."""
    query = urllib.parse.urlencode(
        {
            "cwd": event.get("cwd", ""),
            "session_id": event["session_id"],
            "platform": event["platform"],
        }
    )
    request = urllib.request.Request(
        f"{env.url}/v1/sessions/resume?{query}",
        headers=headers(env.api_key, env.project),
        method="GET",
    )
    result: list[str] = []

    def ask() -> None:
        try:
            # the socket timeout bounds each step; the join below bounds the total
            with urllib.request.urlopen(request, timeout=deadline) as response:
                body = json.loads(response.read(2_000_000))
            if isinstance(body, dict) and body.get("inject", True):
                context = body.get("context")
                if isinstance(context, str):
                    result.append(context)
        except Exception:  # noqa: BLE001 - fail open: no context is always acceptable
            pass

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(deadline)
    return result[0].strip() if result else ""


def render(platform: str, event_name: str, context: str) -> str:
    """The hook's stdout for ``context``, in the field the host reads."""
    if not context:
        return ""
    if platform == "kimi":
        return context + "\n"
    answer = {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}}
    return json.dumps(answer, ensure_ascii=False) + "\n"
