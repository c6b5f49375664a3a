"""Tag rules (KEEP_PROTOCOL §6.5), with hypothesis for the merge algebra."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.kit import tags as t

keys = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_-]{0,12}", fullmatch=True)
values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
values = values.map(str.strip).filter(bool)
tag_maps = st.dictionaries(
    keys, st.one_of(values, st.lists(values, min_size=1, max_size=4)), max_size=6
)


def test_keys_are_casefolded_and_system_keys_dropped() -> None:
    deletes, adds = t.user_tag_changes({"Topic": "Auth", "_created": "x", "gone": ""})
    assert adds == {"topic": ["Auth"]}  # values keep their case
    assert deletes == {"gone"}


@pytest.mark.parametrize("bad", ["9x", "a b", "a=b", "é", "x" * 129, ""])
def test_bad_keys(bad: str) -> None:
    with pytest.raises(t.InvalidTags):
        t.user_tag_changes({bad: "v"})


def test_value_limits() -> None:
    with pytest.raises(t.InvalidTags):
        t.user_tag_changes({"k": "v" * 4097})
    with pytest.raises(t.InvalidTags):
        t.user_tag_changes({"k": [str(i) for i in range(513)]})
    _deletes, adds = t.user_tag_changes({"k": [str(i) for i in range(512)] + ["0", "1"]})
    assert len(adds["k"]) == 512


def test_single_value_packs_to_scalar_and_lists_dedupe() -> None:
    merged = t.apply_changes({}, add={"a": ["x"], "b": ["y", "z", "y"]})
    assert merged == {"a": "x", "b": ["y", "z"]}


@given(tag_maps, tag_maps)
def test_additive_merge_keeps_every_value(base_raw: dict, add_raw: dict) -> None:
    _, base_adds = t.user_tag_changes(base_raw)
    base = t.apply_changes({}, add=base_adds)
    _, adds = t.user_tag_changes(add_raw)
    merged = t.apply_changes(base, add=adds)
    for key, vals in [*base_adds.items(), *adds.items()]:
        assert set(vals) <= set(t.values_of(merged[key], key))
    assert t.apply_changes(merged, add=adds) == merged  # idempotent


@given(tag_maps)
def test_remove_keys_and_values(raw: dict) -> None:
    _, adds = t.user_tag_changes(raw)
    base = t.apply_changes({}, add=adds)
    assert t.apply_changes(base, remove_keys=set(base)) == {}
    emptied = t.apply_changes(base, remove_values={k: t.values_of(v, k) for k, v in base.items()})
    assert emptied == {}


@given(tag_maps)
def test_index_terms_match_filters(raw: dict) -> None:
    _, adds = t.user_tag_changes(raw)
    merged = t.apply_changes({}, add=adds)
    terms = set(t.index_terms(merged))
    for key, vals in adds.items():
        assert set(t.filter_terms({key: vals})) <= terms
        assert set(t.filter_terms(None, [key])) <= terms
        assert t.matches(merged, {key: vals})
