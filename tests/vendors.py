"""A local HTTP server that speaks the hosted providers' wire formats.

The network is closed here, so hosted providers are tested against this:
OpenAI-compatible (embeddings, chat completions), Mistral and Voyage
embeddings, Gemini batchEmbedContents and Anthropic messages. It records
every request and can be told to fail or to be slow.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def fake_vector(text: str, dim: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [((digest[i % 32] + i) % 17 - 8) / 8 for i in range(dim)]


@dataclass
class Vendor:
    dim: int = 8
    delay: float = 0.0
    fail_status: int | None = None
    fail_times: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    summary: str = "A short summary from the model."
    # (input, output) tokens a chat reply reports in its ``usage`` block; None: no block
    usage: tuple[int, int] | None = None
    # chat replies to give, one a call, before falling back to ``summary``
    script: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
            failing = self.fail_status is not None and self.fail_times != 0
            if failing and self.fail_times > 0:
                self.fail_times -= 1
        if self.delay:
            time.sleep(self.delay)
        if failing:
            return self.fail_status or 500, {"error": {"message": "induced failure"}}
        if path.endswith("/embeddings"):
            inputs = body["input"]
            return 200, {
                "object": "list",
                "model": body.get("model"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t, self.dim)}
                    for i, t in enumerate(inputs)
                ],
            }
        if m := re.search(r"/models/([^/:]+):batchEmbedContents$", path):
            return 200, {
                "embeddings": [
                    {"values": fake_vector(r["content"]["parts"][0]["text"], self.dim)}
                    for r in body["requests"]
                ],
                "model": m.group(1),
            }
        if path.endswith("/chat/completions"):
            return 200, {
                **self._usage("prompt_tokens", "completion_tokens"),
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": self._said()},
                    }
                ],
            }
        if path.endswith("/v1/messages"):
            return 200, {
                **self._usage("input_tokens", "output_tokens"),
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": self._said()}],
                "stop_reason": "end_turn",
            }
        return 404, {"error": "no such endpoint"}

    def _said(self) -> str:
        """The next scripted chat reply, else ``summary``."""
        with self.lock:
            return self.script.pop(0) if self.script else self.summary

    def _usage(self, tokens_in: str, tokens_out: str) -> dict[str, Any]:
        """A chat reply's ``usage`` block under the vendor's names, if one is set."""
        if self.usage is None:
            return {}
        return {"usage": {tokens_in: self.usage[0], tokens_out: self.usage[1]}}


class VendorServer:
    def __init__(self, vendor: Vendor | None = None) -> None:
        self.vendor = vendor or Vendor()
        vendor_ref = self.vendor

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload = vendor_ref.reply(
                    self.path.split("?")[0], {k.lower(): v for k, v in self.headers.items()}, body
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> VendorServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
