"""Sanitising at ingest: what must never be stored, summarised, embedded or
sent to a provider.

``<private>…</private>`` spans are removed (an unclosed one runs to the end:
better to lose a tail than to keep a secret). Secrets are replaced by
``[REDACTED:<kind>]``: private key blocks, provider API keys and tokens (AWS,
GitHub, OpenAI, Anthropic, Slack, Stripe, Google, Hugging Face, keepmem's own),
JWTs, bearer tokens, passwords in URLs and ``password = …``-style
assignments. The patterns follow the token formats the providers document;
they are deliberately specific so ordinary prose is left alone.

On by default; a project turns it off with the setting ``sanitize: false``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

_PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)

_KEY_BLOCK = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END \1PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)

# (kind, pattern); the whole match is replaced.
_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("anthropic-key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    ("openai-key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("gitlab-token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("keepmem-key", re.compile(r"\bkm_[a-z0-9]{8}_[A-Za-z0-9_-]{20,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
)

_BEARER = re.compile(r"\b(Bearer|Token)(\s+)[A-Za-z0-9._~+/=-]{16,}", re.IGNORECASE)
# user:password@ inside the authority only: neither part may cross "/", "?"
# or "#" (in "http://h:1#@x/" the "@" is in the fragment, not user info).
_URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^/?#\s:@]+:)([^@\s/?#]+)@", re.IGNORECASE)
_ASSIGNED = re.compile(
    r"(?i)\b((?:[a-z0-9]+[_-])*(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key"
    r"|access[_-]?token|auth[_-]?token|client[_-]?secret|private[_-]?key)"
    r"[\"']?\s*[:=]\s*)([\"']?)([^\s\"',;]{6,})\2"
)


# What each pattern cannot match without: a text holding none of a
# pattern's literals skips it (most text holds no secret, and a substring
# test is far cheaper than a regular expression's scan).
_LITERALS: dict[str, tuple[str, ...]] = {
    "anthropic-key": ("sk-ant-",),
    "openai-key": ("sk-",),
    "aws-access-key": ("AKIA", "ASIA", "AGPA", "AIDA", "AROA"),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab-token": ("glpat-",),
    "slack-token": ("xox",),
    "stripe-key": ("_live_", "_test_"),
    "google-api-key": ("AIza",),
    "huggingface-token": ("hf_",),
    "keepmem-key": ("km_",),
    "jwt": ("eyJ",),
}
# The same for the case-insensitive patterns, in lower case.
_BEARER_WORDS = ("bearer", "token")
_ASSIGNED_WORDS = ("pass", "pwd", "secret", "key", "token")


_ANY_LITERAL = re.compile("|".join(re.escape(x) for xs in _LITERALS.values() for x in xs))
_ANY_WORD = re.compile("|".join((*_BEARER_WORDS, *_ASSIGNED_WORDS)), re.IGNORECASE)
# No secret any pattern matches is shorter ("pwd=abcdef").
_SHORTEST = 10


def _holds(text: str, literals: tuple[str, ...]) -> bool:
    return any(lit in text for lit in literals)


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


@dataclass(slots=True)
class Report:
    """What was taken out (kinds and counts, never the values)."""

    redacted: dict[str, int] = field(default_factory=dict)
    private_spans: int = 0

    def add(self, kind: str, n: int = 1) -> None:
        if n:
            self.redacted[kind] = self.redacted.get(kind, 0) + n

    @property
    def changed(self) -> bool:
        return bool(self.redacted or self.private_spans)


def clean_spans(text: str, report: Report | None = None) -> str:
    """``text`` without the redactions that may run over many lines (private
    spans, private key blocks): what must see the whole text before a
    caller keeps only parts of it."""
    report = report if report is not None else Report()
    if "<" in text and "<private>" in text.lower():
        text, n = _PRIVATE.subn("", text)
        report.private_spans += n
    if "PRIVATE KEY" in text:
        text, n = _KEY_BLOCK.subn(marker("private-key"), text)
        report.add("private-key", n)
    return text


def clean(text: str, report: Report | None = None) -> str:
    """``text`` without private spans and with secrets replaced by markers."""
    report = report if report is not None else Report()
    text = clean_spans(text, report)
    if len(text) < _SHORTEST:
        return text
    if _ANY_LITERAL.search(text) is not None:
        for kind, pattern in _TOKENS:
            if _holds(text, _LITERALS[kind]):
                text, n = pattern.subn(marker(kind), text)
                report.add(kind, n)
    words = _ANY_WORD.search(text) is not None
    low = text.lower() if words else ""
    if words and _holds(low, _BEARER_WORDS):
        text, n = _BEARER.subn(lambda m: f"{m.group(1)}{m.group(2)}{marker('bearer-token')}", text)
        report.add("bearer-token", n)
    if "://" in text and "@" in text:
        text, n = _URL_PASSWORD.subn(lambda m: f"{m.group(1)}{marker('url-password')}@", text)
        report.add("url-password", n)
    if not words or not _holds(low, _ASSIGNED_WORDS):
        return text

    def assigned(m: re.Match[str]) -> str:
        if m.group(3).startswith("[REDACTED:"):
            return m.group(0)
        report.add("password")
        return f"{m.group(1)}{m.group(2)}{marker('password')}{m.group(2)}"

    return _ASSIGNED.sub(assigned, text)


def clean_uri(uri: str, report: Report | None = None) -> str:
    """A URI without the password of its user info (it becomes a note id).

    Parsed as a URI, not matched as text, and never changes the scheme, host
    or port it points to: when the parser sees no password, or removing it
    would move the URI elsewhere, the URI is returned as it was."""
    report = report if report is not None else Report()
    try:
        parts = urlsplit(uri)
        if parts.password is None or parts.username is None:
            return uri
        host = parts.netloc.rpartition("@")[2]
        out = urlunsplit(parts._replace(netloc=f"{parts.username}@{host}"))
        after = urlsplit(out)
        same = (after.scheme, after.hostname, after.port) == (
            parts.scheme,
            parts.hostname,
            parts.port,
        )
    except ValueError:  # not a URI the parser accepts: the id rules refuse it later
        return uri
    if not same or after.password is not None:
        return uri
    report.add("url-password")
    return out


def clean_tags(tags: Mapping[str, Any] | None, report: Report | None = None) -> dict[str, Any]:
    """Tag values sanitised like text (keys are identifiers: left as they are)."""
    report = report if report is not None else Report()
    out: dict[str, Any] = {}
    for key, value in (tags or {}).items():
        if isinstance(value, str):
            out[key] = clean(value, report)
        elif isinstance(value, list):
            out[key] = [clean(v, report) if isinstance(v, str) else v for v in value]
        else:
            out[key] = value
    return out


def enabled(project_settings: Mapping[str, Any]) -> bool:
    return project_settings.get("sanitize", True) is not False


T = TypeVar("T")


def clean_fields(data: T, *, text: tuple[str, ...] = (), tags: tuple[str, ...] = ()) -> T:
    """A copy of a dataclass with its text fields and tag maps sanitised."""
    changes: dict[str, Any] = {}
    for name in text:
        value = getattr(data, name)
        if isinstance(value, str):
            changes[name] = clean(value)
    for name in tags:
        value = getattr(data, name)
        if value:
            changes[name] = clean_tags(value)
    if getattr(data, "uri", None):
        changes["uri"] = clean_uri(data.uri)  # type: ignore[attr-defined]
    return dataclasses.replace(data, **changes)  # type: ignore[type-var]
