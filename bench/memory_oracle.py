"""An oracle in place of a memory-extraction model, for bench/memory.py.

A local OpenAI-compatible ``/v1/chat/completions`` server (standard library
``http.server``) that answers the worker's extraction request with the GOLD
reading of the benchmark's scenarios: it parses the numbered messages of the
request ("[n] <time> <speaker> (<role>): <text>"), looks each one up by
speaker and text, and returns the facts the scenario generator knows it
states, in the JSON the extractor parses (app/providers/extraction_llm.py).
``replaces`` names a known memory ("(k) subject | attribute | value |
statement" in the request) of the same subject and attribute that the fact
restates, changes or retracts, and only when that memory was said before
this message (an old conversation imported late replaces nothing newer).

It is not a model and says nothing of a model's quality: with it, the
benchmark measures what keepmem does with a perfect reading (reconciliation,
supersede, and find).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.memory_scenarios import Fact, Scenario, words

LINE = re.compile(r"^\[(\d+)\] (\S+) (.+?) \((user|assistant|system|tool)\): (.*)$")
KNOWN = re.compile(r"^\((\d+)\) (.*?) \| (.*?) \| (.*?) \| (.*)$")


def _key(*parts: str) -> tuple[str, ...]:
    return tuple(" ".join(words(p)) for p in parts)


def _at(raw: str) -> datetime:
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).replace(tzinfo=None)


class Oracle:
    """The gold of ``scenarios`` served over HTTP on 127.0.0.1 (a port of its own)."""

    def __init__(self, scenarios: Sequence[Scenario]) -> None:
        self.gold: dict[tuple[str, ...], list[Fact]] = {}
        self.said_at: dict[tuple[str, ...], list[datetime]] = {}
        for s in scenarios:
            for b in s.batches:
                for m in b.messages:
                    speaker = m.name if m.role != "assistant" else "helper"
                    self.gold[_key(speaker, m.text)] = m.facts
                    for f in m.facts:
                        slot = _key(f.subject, f.attribute, f.value, str(f.negated))
                        self.said_at.setdefault(slot, []).append(m.at)
        self.calls = 0
        self.lines = 0
        self.unknown = 0
        self.returned = 0
        self.replaces = 0
        self.lock = threading.Lock()
        oracle = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(size) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                text = str(body["messages"][-1]["content"])
                reply = json.dumps({"memories": oracle.read(text)})
                self._send(
                    200,
                    {
                        "id": "oracle",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": reply},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": len(text) // 4,
                            "completion_tokens": len(reply) // 4,
                        },
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Oracle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _older(self, subject: str, attribute: str, value: str, negated: bool, t: datetime) -> bool:
        said = self.said_at.get(_key(subject, attribute, value, str(negated)), [])
        return any(at < t for at in said)

    def _replaces(
        self, f: Fact, t: datetime, known: list[tuple[int, str, str, str, bool]]
    ) -> int | None:
        for k, subject, attribute, value, negated in known:
            if _key(subject, attribute) != _key(f.subject, f.attribute):
                continue
            same = _key(value) == _key(f.value)
            changed = f.replaces is not None and _key(value) == _key(f.replaces)
            if (f.single or same or changed) and self._older(subject, attribute, value, negated, t):
                return k
        return None

    def read(self, text: str) -> list[dict[str, Any]]:
        """The gold memories of one request, merged when said twice in it."""
        messages: list[tuple[int, datetime, str, str]] = []
        known: list[tuple[int, str, str, str, bool]] = []
        for line in text.splitlines():
            if m := LINE.match(line):
                messages.append((int(m[1]), _at(m[2]), m[3], m[5]))
            elif k := KNOWN.match(line):
                known.append((int(k[1]), k[2], k[3], k[4], "no longer" in k[5]))
        items: dict[tuple[str, ...], dict[str, Any]] = {}
        with self.lock:
            self.calls += 1
            self.lines += len(messages)
            for n, at, speaker, said in messages:
                facts = self.gold.get(_key(speaker, said))
                if facts is None:
                    self.unknown += 1
                    continue
                for f in facts:
                    key = _key(f.subject, f.attribute, f.value, str(f.negated))
                    if key in items:
                        items[key]["sources"].append(n)
                        continue
                    replaces = self._replaces(f, at, known)
                    self.replaces += replaces is not None
                    items[key] = {
                        "kind": f.kind,
                        "subject": f.subject,
                        "attribute": f.attribute,
                        "value": f.value,
                        "statement": f.statement() + ".",
                        "confidence": 0.95,
                        "single": f.single,
                        "negated": f.negated,
                        "valid_at": None,
                        "sources": [n],
                        "replaces": replaces,
                    }
            self.returned += len(items)
        return list(items.values())

    def stats(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "message_lines": self.lines,
            "unknown_lines": self.unknown,
            "memories_returned": self.returned,
            "with_replaces": self.replaces,
        }
