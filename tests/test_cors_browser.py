"""The TypeScript SDK in headless Chromium, on pages of other origins than
keepmem's (static servers on their own ports): from an origin the project
allows (``cors_origins``) a page puts and finds notes; from one that no
project allows the browser refuses the call after the preflight (a
connection error to the page), and nothing is stored; from an origin
another project allows, the project's own refusal reaches the page as a
typed 403."""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import Browser, missing
from tests.conftest import MakeTenant, Tenant
from tests.ts_sdk import built

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>keepmem from another origin</title>
<script type="module">
import { Keepmem } from "./sdk/index.js";

// Runs the SDK as a page would; the answer (or the error's kind) for the test.
window.tryKeepmem = async (url, apiKey, project, noteId) => {
  const km = new Keepmem({ url, apiKey, project: project || undefined, maxRetries: 0 });
  try {
    const put = await km.put("written from a page of another origin", { id: noteId });
    const found = await km.find("another origin", { stages: "text" });
    return { ok: true, put: put.id, found: found.notes.map((n) => n.id) };
  } catch (error) {
    return {
      ok: false, name: error.name, message: String(error.message),
      status: error.status ?? null, code: error.code ?? null,
      cause: error.cause ? String(error.cause) : null,
    };
  }
};
document.title = "ready";
</script>
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def static_site(root: Path) -> Iterator[str]:
    """``root`` served over HTTP on a port of its own: an origin of its own."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page and the SDK as built (client-ts/dist), as a site serves them."""
    dist = built()
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(dist, root / "sdk")
    (root / "index.html").write_text(PAGE)
    return root


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    problem = missing()
    assert problem is None, problem
    b = Browser("about:blank")
    try:
        yield b
    finally:
        b.close()


def run_page(b: Browser, origin: str, api: str, t: Tenant, note_id: str, project: str = "") -> Any:
    """The page of ``origin`` calling keepmem at ``api`` through the SDK."""
    b.driver.get(f"{origin}/index.html")
    b.until(lambda d: d.title == "ready", "the page's module to load")
    b.driver.set_script_timeout(30)
    return b.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.tryKeepmem(arguments[0], arguments[1], arguments[2], arguments[3]).then(done);",
        api,
        t.key,
        project,
        note_id,
    )


def allow(api: str, t: Tenant, origins: list[str]) -> None:
    """Set the default project's ``cors_origins`` (an admin key) through the
    live server itself, and wait until its preflights allow the first."""
    r = httpx.patch(
        f"{api}/v1/settings", json={"cors_origins": origins}, headers=t.headers, timeout=30
    )
    assert r.status_code == 200, r.text
    assert r.json()["cors_origins"] == origins
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if preflight(api, origins[0]).status_code == 204:
            return
        time.sleep(0.2)
    raise AssertionError(f"preflights from {origins[0]} still refused")


def preflight(api: str, origin: str) -> httpx.Response:
    return httpx.options(
        f"{api}/v1/notes",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
        timeout=30,
    )


def stored(api: str, t: Tenant, note_id: str, project: str = "") -> bool:
    headers = t.project(project) if project else t.headers
    r = httpx.get(f"{api}/v1/notes/{note_id}", headers=headers, timeout=30)
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


async def test_a_page_of_an_allowed_origin_calls_keepmem_and_others_are_refused(
    chromium: Browser, site: Path, live_url: str, make_tenant: MakeTenant
) -> None:
    t = await make_tenant()
    with static_site(site) as allowed, static_site(site) as stranger:
        assert allowed != stranger  # two ports: two origins
        assert preflight(live_url, allowed).status_code == 403  # none by default
        allow(live_url, t, [allowed])

        ok = run_page(chromium, allowed, live_url, t, "from-page")
        assert ok == {"ok": True, "put": "from-page", "found": ["from-page"]}, ok
        assert stored(live_url, t, "from-page")

        # No project allows this origin: the preflight is refused, the browser
        # never sends the request, and the page sees a connection error.
        assert preflight(live_url, stranger).status_code == 403
        refused = run_page(chromium, stranger, live_url, t, "from-stranger")
        assert refused["ok"] is False, refused
        assert refused["name"] == "APIConnectionError" and refused["status"] is None, refused
        assert "TypeError" in (refused["cause"] or ""), refused
        assert not stored(live_url, t, "from-stranger")

        # An origin another project allows passes the preflight; this
        # project's own refusal is readable by the page: a typed 403.
        other = run_page(chromium, allowed, live_url, t, "from-page", project="elsewhere")
        assert other["ok"] is False, other
        assert other["name"] == "PermissionDeniedError", other
        assert (other["status"], other["code"]) == (403, "origin_not_allowed"), other
        assert not stored(live_url, t, "from-page", project="elsewhere")
