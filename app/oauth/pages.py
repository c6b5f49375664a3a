"""The consent page: plain HTML, no script, every value escaped."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from fastapi.responses import HTMLResponse

from app.errors import AppError
from app.oauth.service import ConsentRequest

# Form fields the page adds; everything else is the client's request, echoed back.
CONSENT_FIELDS = frozenset({"api_key", "project", "scopes", "tags", "decision"})
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title></head><body><main>{body}</main></body></html>"
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def consent(asked: ConsentRequest, args: Mapping[str, list[str]]) -> HTMLResponse:
    hidden = "".join(
        f'<input type=hidden name="{escape(k)}" value="{escape(v)}">'
        for k, values in args.items()
        if k not in CONSENT_FIELDS
        for v in values[:1]
    )
    boxes = "".join(
        f'<label><input type=checkbox name=scopes value="{s}" checked> {s}</label><br>'
        for s in asked.scopes
    )
    body = (
        f"<h1>Allow {escape(asked.client_name)} to use your keepmem memory?</h1>"
        f"<p>It will be sent back to <code>{escape(asked.redirect_uri)}</code>.</p>"
        '<form method=post action="authorize">'
        f"{hidden}"
        "<p><label for=api_key>API key of your tenant</label><br>"
        "<input id=api_key name=api_key type=password autocomplete=off required></p>"
        "<p><label for=project>Project</label><br>"
        '<input id=project name=project value="default"></p>'
        f"<fieldset><legend>Scopes</legend>{boxes}</fieldset>"
        "<p><label for=tags>Tag scope (optional, key=value per line): the client sees and "
        "writes only notes with these tags</label><br><textarea id=tags name=tags rows=2>"
        "</textarea></p>"
        "<p><button name=decision value=allow>Allow</button> "
        "<button name=decision value=deny formnovalidate>Deny</button></p>"
        "</form>"
    )
    return _page("keepmem: allow access", body)


def error(exc: AppError) -> HTMLResponse:
    body = f"<h1>Cannot continue</h1><p>{escape(exc.message)}</p>"
    return _page("keepmem: error", body, status=exc.status_code)
