"""``keepmem-hook``: the command coding-agent CLIs run at their hooks.

    keepmem-hook capture --platform claude-code [--event NAME]   # stdin: the host's JSON
    keepmem-hook flush                                            # send the spool now
    keepmem-hook install claude-code|codex|gemini|kimi [--scope project|user] [--dir PATH] [--print]

``capture`` always exits 0 and prints nothing unless it is handing the host
its context: a hook that fails, blocks or prints noise would break the
agent it serves (Claude Code even reads exit code 2 as "block this tool").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from keepmem_client.hooks.adapters import PLATFORMS, adapt
from keepmem_client.hooks.env import HookEnv
from keepmem_client.hooks.resume import (
    fetch_context,
    mark_injected,
    note_event,
    render,
    wants_context,
)
from keepmem_client.hooks.spool import flush, log_error, start_flusher, write_event


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    # argparse exits with 2 on a usage error, which a host may read as
    # "block": raise instead and let main() choose the exit code.
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="keepmem-hook", description="keepmem hooks for coding-agent CLIs")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="record one hook event (stdin: the host's JSON)")
    cap.add_argument("--platform", required=True, choices=PLATFORMS)
    cap.add_argument("--event", help="the host's event name (default: hook_event_name)")
    sub.add_parser("flush", help="send the spooled events now, in the foreground")
    inst = sub.add_parser("install", help="add keepmem's hooks to a CLI's configuration")
    inst.add_argument("platform", choices=PLATFORMS)
    inst.add_argument("--scope", choices=("project", "user"), default="project")
    inst.add_argument("--dir", type=Path, help="the project (or, for --scope user, home) dir")
    inst.add_argument("--print", action="store_true", help="print the result, write nothing")
    return parser


def capture(platform: str, event_arg: str | None) -> int:
    """Read one hook payload from stdin, spool it, start the flusher, and
    answer with the context where the host reads it. Always returns 0."""
    env = HookEnv.load()
    if not env.enabled:
        return 0
    try:
        payload = json.loads(sys.stdin.buffer.read() or b"{}")
        if not isinstance(payload, dict):
            return 0
        event_name = event_arg or payload.get("hook_event_name")
        if not isinstance(event_name, str):
            return 0
        event = adapt(platform, event_name, payload)
        if event is None:
            return 0
        write_event(env, event)
        note_event(env.spool_dir, event)
        try:
            start_flusher(env)
        except OSError as exc:  # the event is spooled: the next hook's flusher sends it
            log_error(env.spool_dir, f"could not start the flusher: {exc!r}")
        if wants_context(platform, event_name, event, env.spool_dir):
            context = fetch_context(env, event)
            mark_injected(env.spool_dir, event["session_id"])
            out = render(platform, event_name, context)
            if out:
                sys.stdout.write(out)
                sys.stdout.flush()
    except Exception as exc:  # noqa: BLE001 - fail open, whatever went wrong
        log_error(env.spool_dir, f"capture {platform} {event_arg or ''}: {exc!r}")
    return 0


def _install(args: argparse.Namespace) -> int:
    from keepmem_client.hooks.install import install  # only this command needs it

    try:
        path, text = install(args.platform, args.scope, args.dir, args.print)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"keepmem-hook install: {exc}\n")
        return 1
    if args.print:
        sys.stdout.write(text)
    else:
        sys.stdout.write(f"keepmem hooks for {args.platform} written to {path}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The ``keepmem-hook`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(argv)
    except _UsageError as exc:
        sys.stderr.write(f"keepmem-hook: {exc}\n")
        return 0 if "capture" in argv else 2
    if args.command == "capture":
        return capture(args.platform, args.event)
    if args.command == "flush":
        env = HookEnv.load()
        if env.enabled:
            try:
                flush(env)
            except Exception as exc:  # noqa: BLE001 - a detached process has nowhere to report
                log_error(env.spool_dir, f"flush: {exc!r}")
        return 0
    return _install(args)
