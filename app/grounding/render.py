"""An opened citation as a page: the text with the quote marked."""

from __future__ import annotations

import html

from app.grounding.citations import Opened


def as_text(opened: Opened) -> str:
    t, s, e = opened.text, opened.start, opened.end
    return f"{t[:s]}[[{t[s:e]}]]{t[e:]}"


def as_html(opened: Opened) -> str:
    t, s, e = opened.text, opened.start, opened.end
    c, verdict = opened.citation, opened.verdict
    where = ", ".join(f"{k} {v}" for k, v in c.locator.items())
    about = f"version {c.version}" + (f", {where}" if where else "")
    esc = html.escape
    return (
        "<!doctype html><meta charset=utf-8>"
        f"<title>{esc(c.note)} {c.start}..{c.end}</title>"
        f"<p>{esc(c.note)} ({esc(about)}) &mdash; {esc(verdict.status)}: "
        f"{esc(verdict.diagnosis)}</p>"
        f"<pre style='white-space:pre-wrap'>{esc(t[:s])}<mark>{esc(t[s:e])}</mark>"
        f"{esc(t[e:])}</pre>"
    )


def headers(opened: Opened) -> dict[str, str]:
    """The verdict, for a client that reads the page's headers."""
    diagnosis = opened.verdict.diagnosis.encode("ascii", "replace").decode()[:500]
    return {"X-Citation-Status": opened.verdict.status, "X-Citation-Diagnosis": diagnosis}
