"""The web dashboard at ``/ui``: static HTML, CSS and JavaScript written here.

The page signs in with an API key (kept in the tab's session storage, sent
as a bearer header) and talks to the public REST API only: it has no routes
or powers of its own. Every response under ``/ui`` carries a strict
Content-Security-Policy: scripts and styles from this origin only, no inline
script or style, no plug-ins, no framing, requests to this origin only; note
content is put on the page as text by the scripts (never parsed as HTML).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.wire import api_router

STATIC = Path(__file__).parent / "static"
PREFIX = "/ui"

POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


class Guarded:
    """An ASGI app with the dashboard's headers on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode().lower() not in _LOWER
                ]
                raw += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, with_headers)


_LOWER = {k.lower() for k in HEADERS}


def mount(app: FastAPI) -> None:
    app.mount(f"{PREFIX}/static", Guarded(StaticFiles(directory=STATIC)), name="ui-static")
    pages = api_router(include_in_schema=False)

    @pages.get(PREFIX)
    async def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=HEADERS, media_type="text/html")

    @pages.get("/favicon.ico")
    async def favicon() -> FileResponse:
        # browsers ask for it on any page without an icon link (the JSON API's too)
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    @pages.get(f"{PREFIX}/")
    async def dashboard_slash() -> RedirectResponse:
        return RedirectResponse(PREFIX, status_code=308)

    app.include_router(pages)
