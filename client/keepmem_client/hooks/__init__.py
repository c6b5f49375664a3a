"""Hooks for coding-agent CLIs (Claude Code, Codex CLI, Gemini CLI, Kimi CLI).

``keepmem-hook capture`` turns a host's hook payload into the normalised
event of ``docs/sessions-contract.md``, spools it and lets a detached flusher
send it; at session start and on the first prompt it answers with the
"where you left off" context. Everything here imports only the standard
library: a hook runs on every tool call and must start fast.
"""
