"""Id rules (KEEP_PROTOCOL §6.2-6.4), with hypothesis for the parsers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.kit.ids import (
    InvalidId,
    content_id,
    is_part_id,
    normalize_id,
    parse_selector,
    validate_project_slug,
)

BLOCKED = "\\`<>|;\"'"
safe_text = (
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters=BLOCKED),
        min_size=1,
        max_size=60,
    )
    .map(str.strip)
    .filter(bool)
)


@given(safe_text)
def test_normalize_is_idempotent(raw: str) -> None:
    try:
        once = normalize_id(raw)
    except InvalidId:
        return
    assert normalize_id(once) == once


@given(safe_text, st.sampled_from([*list(BLOCKED), "\x00", "\n", "\x7f"]))
def test_blocked_characters_are_refused(raw: str, bad: str) -> None:
    with pytest.raises(InvalidId):
        normalize_id(raw[:10] + bad + raw[10:])


@pytest.mark.parametrize("raw", ["", " a", "a ", "x" * 1025])
def test_length_and_whitespace(raw: str) -> None:
    with pytest.raises(InvalidId):
        normalize_id(raw)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("HTTPS://Example.COM:443/a/./b/../c", "https://example.com/a/c"),
        ("http://example.com:80", "http://example.com/"),
        ("http://user:pw@example.com/x", "http://example.com/x"),
        ("https://example.com/%7Euser/%2f", "https://example.com/~user/%2F"),
        ("https://example.com:8443/a?q=%41", "https://example.com:8443/a?q=A"),
        ("file:///tmp/a%20b/it's.md", "file:///tmp/a b/it%27s.md"),
        ("file:///tmp/100%.md", "file:///tmp/100%25.md"),
    ],
)
def test_uri_normalisation(raw: str, expected: str) -> None:
    assert normalize_id(raw) == expected


@given(
    st.sampled_from(["http", "https", "HTTP"]),
    st.from_regex(r"[a-zA-Z0-9]{1,10}(\.[a-z]{2,5}){1,2}", fullmatch=True),
    st.lists(st.from_regex(r"[a-zA-Z0-9._~-]{0,8}", fullmatch=True), max_size=4),
)
def test_http_normalisation_is_idempotent(scheme: str, host: str, segments: list[str]) -> None:
    uri = f"{scheme}://{host}/" + "/".join(segments)
    once = normalize_id(uri)
    assert once == normalize_id(once)
    assert once.startswith(scheme.lower() + "://" + host.lower())


@given(st.text(min_size=1, max_size=200))
def test_content_id_shape(text: str) -> None:
    cid = content_id(text)
    assert cid.startswith("%") and len(cid) == 13
    assert all(c in "0123456789abcdef" for c in cid[1:])
    assert cid == content_id(text)


@given(st.from_regex(r"[a-z][a-z0-9/:-]{0,20}", fullmatch=True), st.integers(-50, 50))
def test_version_selector_round_trip(base: str, n: int) -> None:
    sel = parse_selector(f"{base}@V{{{n}}}")
    assert sel is not None and sel.base_id == base and sel.version == n and sel.part is None


@given(
    st.from_regex(r"[a-z][a-z0-9/-]{0,20}", fullmatch=True),
    st.integers(0, 999),
    st.sampled_from(["@P{%d}", "@p{%d}", "@p%d", "@P%d"]),
)
def test_part_selector_forms(base: str, n: int, form: str) -> None:
    raw = base + form % n
    assert is_part_id(raw)
    sel = parse_selector(raw)
    assert sel is not None and sel.base_id == base and sel.part == n


def test_plain_ids_have_no_selector() -> None:
    assert parse_selector("plain") is None
    assert parse_selector("@V{1}") is None  # no base id
    assert parse_selector("mail@example.com") is None


@given(st.from_regex(r"[a-z][a-z0-9-]{0,61}[a-z0-9]", fullmatch=True))
def test_valid_slugs(slug: str) -> None:
    assert validate_project_slug(slug) == slug


@given(
    st.text(max_size=70).filter(
        lambda s: not __import__("re").fullmatch(r"[a-z][a-z0-9-]{0,61}[a-z0-9]", s)
    )
)
def test_invalid_slugs(slug: str) -> None:
    with pytest.raises(InvalidId):
        validate_project_slug(slug)
