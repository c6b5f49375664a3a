"""A local web server for the URI path: documents, redirects, endless bodies.

Routes are set per test: ``server.add(path, body, content_type)`` or
``server.redirect(path, to)``. ``/huge`` claims 10 GB and streams zeros until
the client hangs up; ``/endless`` does the same without a length. Both count
what they managed to send.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEN_GB = 10 * 2**30


@dataclass
class Routes:
    pages: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)


class DocServer:
    def __init__(self) -> None:
        self.routes = Routes()
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                routes.hits.append(path)
                if path in ("/huge", "/endless"):
                    self._stream(path)
                    return
                status, headers, body = routes.pages.get(
                    path, (404, {"Content-Type": "text/plain"}, b"not found")
                )
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, path: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                if path == "/huge":
                    self.send_header("Content-Length", str(TEN_GB))
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                chunk = b"0" * 65536
                sent = 0
                try:
                    while sent < TEN_GB:
                        self.wfile.write(chunk)
                        sent += len(chunk)
                        routes.sent[path] = sent
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, path: str, body: bytes | str, content_type: str, status: int = 200) -> str:
        data = body.encode() if isinstance(body, str) else body
        self.routes.pages[path] = (status, {"Content-Type": content_type}, data)
        return self.url + path

    def redirect(self, path: str, to: str, status: int = 302) -> str:
        self.routes.pages[path] = (status, {"Location": to}, b"")
        return self.url + path


@contextmanager
def serving() -> Iterator[DocServer]:
    server = DocServer()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
