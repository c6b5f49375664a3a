"""Note ids: validation, normalisation and selector parsing (KEEP_PROTOCOL §6.2-6.4)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from app.errors import BadRequest

MAX_ID_LENGTH = 1024
NOW_ID = "now"

_BLOCKED = re.compile(r"[\x00-\x1f\x7f\\`<>|;\"']")
_FILE_ENCODE = re.compile(r"[\x00-\x1f\x7f\\`<>|;\"'%]")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HEX = frozenset("0123456789abcdefABCDEF")

# ASCII digits only (\d also matches "²"), at most 9: a bigger N names no
# version or part, so such an id is looked up literally (and not found).
VERSION_SUFFIX = re.compile(r"@V\{(-?[0-9]{1,9})\}$")
PART_SUFFIX = re.compile(r"@[pP]\{?([0-9]{1,9})\}?$")
PROJECT_SLUG_PATTERN = r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$"
_SLUG = re.compile(PROJECT_SLUG_PATTERN)


class InvalidId(ValueError):
    """An id that breaks keep's id rules; the message says which."""


def validate_id(note_id: str) -> None:
    if not note_id or len(note_id) > MAX_ID_LENGTH:
        raise InvalidId(f"id must be 1-{MAX_ID_LENGTH} characters")
    if note_id != note_id.strip():
        raise InvalidId("id cannot have leading or trailing whitespace")
    if _BLOCKED.search(note_id):
        raise InvalidId(f"id contains invalid characters: {note_id!r}")


def _decode_unreserved(value: str) -> str:
    """Decode %XX escapes of unreserved characters; upper-case the others."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        pair = value[i + 1 : i + 3]
        if ch == "%" and len(pair) == 2 and all(c in _HEX for c in pair):
            decoded = chr(int(pair, 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + pair.upper())
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _remove_dot_segments(path: str) -> str:
    kept: list[str] = []
    for segment in path.split("/"):
        if segment == ".":
            continue
        if segment == "..":
            if kept and kept[-1] != "":
                kept.pop()
            continue
        kept.append(segment)
    resolved = "/".join(kept)
    if path.startswith("/") and not resolved.startswith("/"):
        resolved = "/" + resolved
    return resolved


def normalize_http_uri(uri: str) -> str:
    """RFC 3986 §6.2.2 normalisation; credentials are never kept in an id."""
    try:
        parts = urlsplit(uri)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL"
        raise InvalidId(f"invalid URI {uri[:200]!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidId(f"invalid port in URI: {uri!r}") from exc
    if port is not None and port == _DEFAULT_PORTS.get(scheme):
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    path = _remove_dot_segments(_decode_unreserved(parts.path)) or "/"
    return urlunsplit(
        (scheme, netloc, path, _decode_unreserved(parts.query), _decode_unreserved(parts.fragment))
    )


def _encode_blocked(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group(0).encode("utf-8"))


def normalize_file_uri(uri: str) -> str:
    """One-to-one with on-disk paths: decode, then re-encode blocked chars and ``%``."""
    decoded = unquote(uri[7:])
    return uri[:7] + _FILE_ENCODE.sub(_encode_blocked, decoded)


def is_http_uri(value: str) -> bool:
    return value[:8].lower().startswith(("http://", "https://"))


def normalize_id(note_id: str) -> str:
    """Validate an id and return its canonical form (URIs normalised, NFC)."""
    if not isinstance(note_id, str):
        raise InvalidId("id must be a string")
    if note_id[:7].lower() == "file://":
        note_id = normalize_file_uri(note_id)
    validate_id(note_id)
    note_id = unicodedata.normalize("NFC", note_id)
    if is_http_uri(note_id):
        note_id = normalize_http_uri(note_id)
        validate_id(note_id)
    return note_id


def content_id(content: str) -> str:
    """Content-addressed id for inline text put without an id: ``%`` + 12 hex."""
    return "%" + hashlib.sha256(content.encode("utf-8")).hexdigest()[:12]


def is_system_id(note_id: str) -> bool:
    """Dot-prefixed ids are system notes, hidden unless asked for."""
    return note_id.startswith(".")


def is_part_id(note_id: str) -> bool:
    return PART_SUFFIX.search(note_id) is not None


def is_now_id(note_id: str) -> bool:
    return note_id == NOW_ID or note_id.startswith(NOW_ID + ":")


@dataclass(frozen=True, slots=True)
class Selector:
    """What a path id refers to once the literal note was not found."""

    base_id: str
    version: int | None = None  # 0 = current, N = N back, -N = N-th oldest
    part: int | None = None


def parse_selector(note_id: str) -> Selector | None:
    """Parse ``ID@V{N}`` / ``ID@P{N}``; None when the id carries neither.

    Callers look the literal id up first: a note may really be called
    ``release@V{2}``.
    """
    if m := VERSION_SUFFIX.search(note_id):
        base = note_id[: m.start()]
        if base:
            return Selector(base_id=normalize_id(base), version=int(m.group(1)))
    if m := PART_SUFFIX.search(note_id):
        base = note_id[: m.start()]
        if base:
            return Selector(base_id=normalize_id(base), part=int(m.group(1)))
    return None


def validate_project_slug(slug: str) -> str:
    """Project slugs follow keep's client rule (KEEP_PROTOCOL §1.2)."""
    if not _SLUG.match(slug):
        raise InvalidId(
            f"invalid project slug {slug!r}: 2-63 chars of a-z, 0-9 and '-', "
            "starting with a letter and not ending with '-'"
        )
    return slug


# -- id globs (list prefix, find scope) ---------------------------------------------


def _bracket(body: str) -> str:
    """A glob's ``[...]`` body as a bracket expression of literal characters
    and ranges: nothing in it reaches the regex engine as syntax."""
    negate = body[:1] in ("!", "^")
    chars = body[1:] if negate else body
    out: list[str] = []
    i = 0
    while i < len(chars):
        lo = chars[i]
        if i + 2 < len(chars) and chars[i + 1] == "-":
            hi = chars[i + 2]
            if lo > hi:
                raise BadRequest(f"invalid range {lo}-{hi} in glob: the first must not be larger")
            out.append(f"{_class_char(lo)}-{_class_char(hi)}")
            i += 3
        else:
            out.append(_class_char(lo))
            i += 1
    return f"[{'^' if negate else ''}{''.join(out)}]"


def _class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\^]-[" else ch


def glob_regex(pattern: str) -> str:
    """An id glob (``*``, ``?``, ``[...]``) as an anchored regular expression
    in which only the glob's own operators are syntax."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and (end := pattern.find("]", i + 2)) != -1:
            out.append(_bracket(pattern[i + 1 : end]))
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    out.append("$")
    return "".join(out)
