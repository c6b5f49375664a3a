"""The hook client (``keepmem-hook``, keepmem_client.hooks) without a server:
host payloads to events, the spool and its flusher against a stdlib
receiver, the hosts' configuration files, and the resume context in each
host's format. No database: these tests request no ``db``/``client``."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from keepmem_client.hooks import cli, spool
from keepmem_client.hooks.adapters import MAX_TEXT, adapt, cut_text
from keepmem_client.hooks.env import HookEnv
from keepmem_client.hooks.install import install
from keepmem_client.hooks.resume import fetch_context

FIXTURES = Path(__file__).parent / "fixtures" / "sessions"
PLATFORMS = ("claude-code", "codex", "gemini", "kimi")
KINDS = {
    "session_start", "prompt", "tool_use", "tool_result", "tool_failure", "subagent_start",
    "subagent_stop", "stop", "pre_compact", "post_compact", "session_end", "notification",
}  # fmt: skip
FIELDS = {
    "platform", "session_id", "kind", "at", "cwd", "tool_name", "tool_input", "tool_output",
    "tool_use_id", "error", "is_interrupt", "prompt", "message", "trigger",
    "custom_instructions", "compact_summary", "source", "reason", "agent_id", "agent_type",
    "turn_id", "model", "original_chars", "original_lines",
}  # fmt: skip
SHORT = ("tool_name", "tool_use_id", "trigger", "source", "reason", "agent_id", "agent_type",
         "turn_id", "model")  # fmt: skip
# Host events the client sends nothing for, per platform.
IGNORED = {"claude-code": {"PermissionRequest"}, "codex": {"PermissionRequest"},
           "gemini": {"BeforeModel"}, "kimi": {"MessageDisplay"}}  # fmt: skip
COMPACT_EVENT = {"claude-code": "PreCompact", "codex": "PostCompact", "gemini": "PreCompress",
                 "kimi": "PreCompact"}  # fmt: skip
PROMPT_EVENT = {"claude-code": "UserPromptSubmit", "codex": "UserPromptSubmit",
                "gemini": "BeforeAgent", "kimi": "UserPromptSubmit"}  # fmt: skip


def _lines(platform: str) -> list[dict[str, Any]]:
    path = FIXTURES / f"{platform}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_event(event: dict[str, Any], platform: str) -> None:
    assert set(event) <= FIELDS, set(event) - FIELDS
    assert event["platform"] == platform and event["kind"] in KINDS
    assert 1 <= len(event["session_id"]) <= 200 and "/" not in event["session_id"]
    assert event["cwd"] == "/home/dev/shop"
    for name in SHORT:
        assert isinstance(event.get(name, ""), str) and len(event.get(name, "")) <= 200
    assert isinstance(event.get("tool_input", {}), dict | str)
    assert "transcript_path" not in json.dumps(event)
    assert "/.claude/projects" not in json.dumps(event) and "/.gemini/tmp" not in json.dumps(event)


# ---------------------------------------------------------------- adapters


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_fixture_line_adapts(platform: str) -> None:
    sessions: dict[str, list[str]] = {}
    for line in _lines(platform):
        name, payload = line["event"], line["payload"]
        event = adapt(platform, name, payload)
        if name in IGNORED[platform] or payload.get("notification_type") == "idle_prompt":
            assert event is None, name
            continue
        assert event is not None, name
        _check_event(event, platform)
        assert event["session_id"] == payload["session_id"]
        sessions.setdefault(event["session_id"], []).append(event["kind"])
        if event["kind"] in ("tool_use", "tool_result", "tool_failure"):
            assert event["tool_name"] == payload["tool_name"]
            assert event["tool_input"] == payload["tool_input"]
            if platform != "gemini":  # Gemini sends no tool call id
                assert event["tool_use_id"] == payload.get(
                    "tool_use_id", payload.get("tool_call_id")
                )
        if event["kind"] == "tool_result":
            assert "tool_output" in event
        if event["kind"] == "tool_failure":
            assert event["error"]
        if event["kind"] == "prompt":
            assert event["prompt"] == payload["prompt"]
    assert len(sessions) >= 3
    for kinds in sessions.values():
        assert {"prompt", "tool_use", "tool_result", "stop"} <= set(kinds)


def test_kinds_per_host() -> None:
    def kinds(platform: str) -> set[tuple[str, str]]:
        events = ((x["event"], adapt(platform, x["event"], x["payload"])) for x in _lines(platform))
        return {(name, e["kind"]) for name, e in events if e is not None}

    assert kinds("claude-code") >= {("PostToolUseFailure", "tool_failure"),
        ("PostCompact", "post_compact"), ("SubagentStart", "subagent_start"),
        ("SessionEnd", "session_end"), ("Notification", "notification")}  # fmt: skip
    assert kinds("gemini") >= {("BeforeAgent", "prompt"), ("AfterAgent", "stop"),
        ("PreCompress", "pre_compact"), ("BeforeTool", "tool_use"),
        ("AfterTool", "tool_failure"), ("AfterTool", "tool_result")}  # fmt: skip
    assert kinds("kimi") >= {("PostToolUseFailure", "tool_failure"), ("PreCompact", "pre_compact")}
    assert kinds("codex") >= {("Stop", "stop"), ("PostCompact", "post_compact")}
    assert adapt("claude-code", "NoSuchEvent", {"session_id": "s1"}) is None
    assert adapt("claude-code", "Stop", {"session_id": ""}) is None
    # An id keepmem would refuse is sent as a stable digest of itself: the
    # session's events are kept, and its resume lookups use the same id.
    odd = adapt("claude-code", "Stop", {"session_id": "has space/and#more"})
    assert (
        odd is not None
        and odd["session_id"]
        == adapt("claude-code", "Stop", {"session_id": "has space/and#more"})["session_id"]
    )
    from app.sessions.schemas import EventIn

    EventIn.model_validate(odd)  # the server takes it


def test_fields_per_host() -> None:
    claude = [adapt("claude-code", x["event"], x["payload"]) for x in _lines("claude-code")]
    post = next(e for e in claude if e and e["kind"] == "post_compact")
    assert "Pending Tasks:" in post["compact_summary"] and post["trigger"] == "manual"
    failure = next(e for e in claude if e and e["kind"] == "tool_failure")
    assert "expected 3 items, got 2" in failure["error"] and failure["is_interrupt"] is False
    todo = next(e for e in claude if e and e.get("tool_name") == "TodoWrite")
    assert todo["tool_input"]["todos"][0]["activeForm"]
    codex = [adapt("codex", x["event"], x["payload"]) for x in _lines("codex")]
    assert all(e["model"] == "gpt-5-codex" for e in codex if e)
    assert any(e and e.get("turn_id") and e["kind"] == "tool_result" for e in codex)
    gemini = [adapt("gemini", x["event"], x["payload"]) for x in _lines("gemini")]
    failed = next(e for e in gemini if e and e["kind"] == "tool_failure")
    assert failed["error"].startswith("Failed to edit") and failed["tool_name"] == "replace"
    assert next(e for e in gemini if e and e["kind"] == "stop")["message"].startswith("Cart.add")
    assert all(e["at"].startswith("2026-11-2") for e in gemini if e)
    kimi = [adapt("kimi", x["event"], x["payload"]) for x in _lines("kimi")]
    assert kimi[0] is not None and kimi[0]["kind"] == "prompt"
    sub = next(e for e in kimi if e and e["kind"] == "subagent_stop")
    assert sub["agent_type"] == "coder" and sub["message"].startswith("Refunds")
    result = next(e for e in kimi if e and e["kind"] == "tool_result")
    assert result["tool_use_id"].startswith("tool_") and isinstance(result["tool_output"], str)


def test_events_match_the_server_schema() -> None:
    schemas = pytest.importorskip("app.sessions.schemas")
    for platform in PLATFORMS:
        events = [adapt(platform, x["event"], x["payload"]) for x in _lines(platform)]
        batch = [e for e in events if e is not None]
        for start in range(0, len(batch), 100):
            schemas.EventBatch.model_validate({"events": batch[start : start + 100]})


def test_long_output_is_cut_with_its_original_size() -> None:
    big = next(
        x
        for x in _lines("claude-code")
        if len(x["payload"].get("tool_response", {}).get("stdout", "")) > 100_000
    )
    stdout = big["payload"]["tool_response"]["stdout"]
    event = adapt("claude-code", big["event"], big["payload"])
    assert event is not None
    assert event["original_chars"] == len(stdout) == 120_012
    assert event["original_lines"] == stdout.count("\n") == 1624
    cut = event["tool_output"]["stdout"]
    assert len(cut) <= MAX_TEXT and event["tool_output"]["interrupted"] is False
    head, _, rest = cut.partition("\n[... ")
    marker, _, tail = rest.partition(" lines cut ...]\n")
    assert stdout.startswith(head) and stdout.endswith(tail) and len(head) > 30_000
    chars, lines = marker.split(" characters, ")
    assert len(head) + int(chars) + len(tail) == len(stdout)
    assert head.count("\n") + int(lines) + tail.count("\n") == stdout.count("\n")


def test_cut_text_keeps_head_and_tail() -> None:
    text = "".join(f"line {i}\n" for i in range(50_000))
    cut = cut_text(text, 1000)
    assert len(cut) <= 1000 and cut.startswith("line 0\n") and cut.endswith("line 49999\n")
    assert cut_text("short", 1000) == "short"
    event = adapt("kimi", "UserPromptSubmit", {"session_id": "s", "prompt": "x" * 70_000})
    assert event is not None and len(event["prompt"]) <= MAX_TEXT


# ---------------------------------------------------------------- a receiver


class Receiver(ThreadingHTTPServer):
    """keepmem's two session routes, recording what the hook client sends."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.posts: list[dict[str, Any]] = []
        self.seen_headers: list[dict[str, str]] = []
        self.gets: list[str] = []
        self.status, self.delay = 202, 0.0
        self.resume: dict[str, Any] = {"context": "hello", "chars": 5, "inject": True}


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.posts.append(body)
        self.server.seen_headers.append(dict(self.headers))
        self._answer(self.server.status, {"accepted": len(body["events"]), "dropped": 0})

    def do_GET(self) -> None:
        self.server.gets.append(self.path)
        time.sleep(self.server.delay)
        self._answer(200, self.server.resume)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _env(tmp_path: Path, url: str, project: str | None = "shop") -> HookEnv:
    return HookEnv(url=url, api_key="km_test", project=project, enabled=True,
                   spool_dir=tmp_path / "spool")  # fmt: skip


def _event(i: int, session: str = "s-1") -> dict[str, Any]:
    return {"platform": "claude-code", "session_id": session, "kind": "prompt", "prompt": f"p{i}"}


# ---------------------------------------------------------------- the spool


def test_flusher_delivers_and_empties_the_spool(tmp_path: Path, receiver: Receiver) -> None:
    env = _env(tmp_path, receiver.url)
    for i in range(60):
        spool.write_event(env, _event(i))
    spool.write_event(_env(tmp_path, receiver.url, project="other"), _event(99))
    assert spool.flush(env, retries=0) is True
    assert spool.spooled(env.spool_dir) == []
    sizes = [len(p["events"]) for p in receiver.posts]
    assert sorted(sizes) == [1, 10, 50]
    sent = [e["prompt"] for p in receiver.posts for e in p["events"]]
    assert sorted(sent) == sorted(f"p{i}" for i in [*range(60), 99])
    assert [e["prompt"] for e in receiver.posts[0]["events"][:3]] == ["p0", "p1", "p2"]
    assert {h["X-Project"] for h in receiver.seen_headers} == {"shop", "other"}
    assert all(h["Authorization"] == "Bearer km_test" for h in receiver.seen_headers)


def test_flusher_keeps_events_on_503_and_drops_them_on_400(
    tmp_path: Path, receiver: Receiver
) -> None:
    env = _env(tmp_path, receiver.url)
    for i in range(3):
        spool.write_event(env, _event(i))
    receiver.status = 503
    assert spool.flush(env, retries=0) is False
    assert len(spool.spooled(env.spool_dir)) == 3
    receiver.status = 400
    assert spool.flush(env, retries=0) is True
    assert spool.spooled(env.spool_dir) == []
    # a refused batch is retried one event at a time before anything is dropped
    assert [len(p["events"]) for p in receiver.posts] == [3, 3, 1, 1, 1]
    assert "dropped refused event" in (env.spool_dir / "errors.log").read_text()


def test_spool_is_capped_oldest_first(tmp_path: Path) -> None:
    env = _env(tmp_path, "http://127.0.0.1:9")
    for i in range(12):
        spool.write_event(env, _event(i))
    assert spool.enforce_cap(env.spool_dir, max_files=10) == 2
    left = [json.loads(p.read_text())["event"]["prompt"] for p in spool.spooled(env.spool_dir)]
    assert left == [f"p{i}" for i in range(2, 12)]


# ---------------------------------------------------------------- capture as a process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proc_env(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}
    env.update(KEEPMEM_URL=url, KEEPMEM_SPOOL_DIR=str(tmp_path / "spool"), HOME=str(tmp_path))
    env.update(extra)
    return env


def _run(args: list[str], payload: Any, env: dict[str, str]) -> tuple[int, str, float]:
    started = time.monotonic()
    data = payload if isinstance(payload, str) else json.dumps(payload)
    done = subprocess.run(
        [sys.executable, "-m", "keepmem_client.hooks", *args], input=data,
        capture_output=True, text=True, env=env, timeout=30, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout, time.monotonic() - started


def test_capture_fails_open_fast_when_keepmem_is_down(tmp_path: Path) -> None:
    start = _lines("claude-code")[0]
    env = _proc_env(tmp_path, f"http://127.0.0.1:{_free_port()}")
    code, out, took = _run(["capture", "--platform", "claude-code"], start["payload"], env)
    assert code == 0 and out == "" and took < 2.0, (code, out, took)
    spooled = [json.loads(p.read_text()) for p in (tmp_path / "spool").glob("*.jsonl")]
    assert [s["event"]["kind"] for s in spooled] == ["session_start"]
    assert "transcript_path" not in json.dumps(spooled)
    assert "km_" not in json.dumps(spooled)  # the key is never written to disk


def test_capture_hands_off_to_a_detached_flusher(tmp_path: Path, receiver: Receiver) -> None:
    line = next(x for x in _lines("codex") if x["event"] == "PostToolUse")
    env = _proc_env(tmp_path, receiver.url, KEEPMEM_API_KEY="km_e2e")
    assert _run(["capture", "--platform", "codex"], line["payload"], env)[:2] == (0, "")
    deadline = time.monotonic() + 10
    while not receiver.posts and time.monotonic() < deadline:
        time.sleep(0.05)
    [event] = receiver.posts[0]["events"]
    assert event["kind"] == "tool_result" and event["tool_use_id"] == line["payload"]["tool_use_id"]
    assert receiver.seen_headers[0]["Authorization"] == "Bearer km_e2e"
    while list((tmp_path / "spool").glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list((tmp_path / "spool").glob("*.jsonl")) == []


def test_capture_off_sends_and_prints_nothing(tmp_path: Path, receiver: Receiver) -> None:
    env = _proc_env(tmp_path, receiver.url, KEEPMEM_HOOKS="off")
    for line in _lines("claude-code")[:3]:
        code, out, _ = _run(["capture", "--platform", "claude-code"], line["payload"], env)
        assert code == 0 and out == ""
    assert not list((tmp_path / "spool").glob("**/*"))
    assert receiver.posts == [] and receiver.gets == []


def test_capture_never_fails_on_bad_input(tmp_path: Path) -> None:
    env = _proc_env(tmp_path, "http://127.0.0.1:9")
    for platform in ("claude-code", "nope"):  # a usage error must not read as "block" either
        assert _run(["capture", "--platform", platform], "{not json", env)[:2] == (0, "")


# ---------------------------------------------------------------- the resume context


def _capture(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             platform: str, payload: dict[str, Any]) -> str:  # fmt: skip
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(payload).encode())))
    assert cli.main(["capture", "--platform", platform]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("platform", PLATFORMS)
def test_context_on_first_prompt_and_after_compaction(
    platform: str, tmp_path: Path, receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for name, value in _proc_env(tmp_path, receiver.url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KEEPMEM_HOOKS", raising=False)
    session = f"resume-{platform}"
    base = {"session_id": session, "cwd": "/home/dev/shop"}
    prompt_event = PROMPT_EVENT[platform]

    def prompt(text: str) -> str:
        return _capture(monkeypatch, capsys, platform,
                        {**base, "hook_event_name": prompt_event, "prompt": text})  # fmt: skip

    first = prompt("fix the cart")
    if platform == "kimi":
        assert first == "hello\n"
    else:
        answer = json.loads(first)
        assert answer == {
            "hookSpecificOutput": {"hookEventName": prompt_event, "additionalContext": "hello"}
        }
    assert prompt("and now the tests") == ""
    compact = {**base, "hook_event_name": COMPACT_EVENT[platform], "trigger": "auto"}
    assert _capture(monkeypatch, capsys, platform, compact) == ""
    assert prompt("go on") == first
    assert prompt("more") == ""
    query = parse_qs(urlsplit(receiver.gets[0]).query)
    assert query == {"cwd": ["/home/dev/shop"], "session_id": [session], "platform": [platform]}
    assert len(receiver.gets) == 2

    started = _capture(monkeypatch, capsys, platform,
                       {**base, "session_id": session + "-2", "hook_event_name": "SessionStart",
                        "source": "startup"})  # fmt: skip
    if platform == "kimi":  # Kimi discards SessionStart output: the first prompt carries it
        assert started == ""
    else:
        assert json.loads(started)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    stop = {**base, "hook_event_name": "AfterAgent" if platform == "gemini" else "Stop"}
    assert _capture(monkeypatch, capsys, platform, stop) == ""


def test_no_context_when_refused_off_or_late(
    tmp_path: Path, receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for name, value in _proc_env(tmp_path, receiver.url).items():
        monkeypatch.setenv(name, value)
    base = {"cwd": "/home/dev/shop", "hook_event_name": "UserPromptSubmit"}
    off = {**base, "session_id": "a", "prompt": "stop recording [keepmem:off]"}
    assert _capture(monkeypatch, capsys, "claude-code", off) == ""
    receiver.resume = {"context": "hello", "chars": 5, "inject": False}
    assert _capture(monkeypatch, capsys, "claude-code", {**base, "session_id": "b",
                                                         "prompt": "x"}) == ""  # fmt: skip
    receiver.resume = {"context": "hello", "chars": 5, "inject": True}
    receiver.delay = 1.0
    env = HookEnv.load()
    started = time.monotonic()
    assert fetch_context(env, {"session_id": "c", "platform": "kimi"}, deadline=0.3) == ""
    assert time.monotonic() - started < 0.8


# ---------------------------------------------------------------- install


def test_install_claude_code_merges_and_is_idempotent(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"type": "command", "command": "./scripts/lint.sh"}
    settings.write_text(json.dumps({
        "model": "opus", "permissions": {"allow": ["Bash(make:*)"]},
        "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [mine]}]},
    }))  # fmt: skip
    path, _ = install("claude-code", "project", tmp_path, print_only=False)
    assert path == settings
    first = settings.read_text()
    data = json.loads(first)
    assert data["model"] == "opus" and data["permissions"] == {"allow": ["Bash(make:*)"]}
    assert {"matcher": "Edit", "hooks": [mine]} in data["hooks"]["PostToolUse"]
    for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse",
                  "PostToolUseFailure", "SubagentStart", "SubagentStop", "Stop", "PreCompact",
                  "PostCompact", "SessionEnd", "Notification"):  # fmt: skip
        ours = [h for g in data["hooks"][event] for h in g["hooks"] if "keepmem" in h["command"]]
        assert len(ours) == 1, event
        assert ours[0]["command"].endswith("capture --platform claude-code")
        assert ours[0]["type"] == "command" and 1 <= ours[0]["timeout"] <= 10
        assert ours[0].get("async", False) is (event not in ("SessionStart", "UserPromptSubmit"))
    install("claude-code", "project", tmp_path, print_only=False)
    assert settings.read_text() == first


@pytest.mark.parametrize("platform", ["codex", "gemini"])
def test_install_json_hosts(platform: str, tmp_path: Path) -> None:
    path, text = install(platform, "user", tmp_path, print_only=False)
    assert path == tmp_path / (
        ".codex/hooks.json" if platform == "codex" else ".gemini/settings.json"
    )
    data = json.loads(path.read_text())
    start = data["hooks"]["SessionStart"][0]["hooks"][0]
    assert start["command"].endswith(f"capture --platform {platform}") and "async" not in start
    assert start["timeout"] == (5000 if platform == "gemini" else 5)  # Gemini counts in ms
    install(platform, "user", tmp_path, print_only=False)
    assert path.read_text() == text


def test_install_kimi_appends_toml_once(tmp_path: Path) -> None:
    config = tmp_path / ".kimi" / "config.toml"
    config.parent.mkdir()
    config.write_text('default_model = "kimi-for-coding"\n\n[[hooks]]\nevent = "Stop"\n'
                      'command = "notify-send done"\n')  # fmt: skip
    install("kimi", "user", tmp_path, print_only=False)
    first = config.read_text()
    data = tomllib.loads(first)
    assert data["default_model"] == "kimi-for-coding"
    ours = [h for h in data["hooks"] if "capture --platform kimi" in h["command"]]
    assert {h["event"] for h in ours} >= {"UserPromptSubmit", "PostToolUse", "SessionStart"}
    assert len(ours) == len({h["event"] for h in ours})
    assert {"event": "Stop", "command": "notify-send done"} in data["hooks"]
    install("kimi", "user", tmp_path, print_only=False)
    assert config.read_text() == first


def test_install_print_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["install", "claude-code", "--dir", str(tmp_path), "--print"])
    assert code == 0 and not (tmp_path / ".claude").exists()
    assert "UserPromptSubmit" in json.loads(capsys.readouterr().out)["hooks"]
