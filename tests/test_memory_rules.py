"""The offline rules and the slot timeline as functions: what a phrase's
value keeps, and what a candidate does to its slot (no database: these are
the pure parts; tests/test_memories.py runs them through the API)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.memories.model import Candidate, Memory, memory_id, stamp
from app.memories.reconcile import ordered, plan
from app.memories.rules import extract
from app.providers.extraction import Said

T1 = datetime(2024, 1, 1, tzinfo=UTC)
T2 = datetime(2024, 3, 1, tzinfo=UTC)
T3 = datetime(2024, 6, 1, tzinfo=UTC)


def read(text: str, role: str = "user", named: bool = False) -> list[tuple[str, str, bool]]:
    said = Said(1, "Cora", role, text, "2024-01-01T00:00:00", named=named)
    return [(p.attribute, p.value, p.negated) for p in extract([said])]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("I moved to Leipzig from Ljubljana.", ("lives_in", "Leipzig", False)),
        ("I'm based in Brno these days", ("lives_in", "Brno", False)),
        ("I moved to the city of Valparaiso", ("lives_in", "Valparaiso", False)),
        ("I moved to Glasgow in the spring.", ("lives_in", "Glasgow", False)),
        ("I work at Acme as a contractor", ("works_at", "Acme", False)),
        ("I love hiking with my dog", ("likes", "hiking", False)),
        ("I don't live in Brno anymore", ("lives_in", "Brno", True)),
        ("We decided to use Postgres for the store", ("decided", "use Postgres", False)),
    ],
)
def test_a_phrase_keeps_the_value_not_what_follows_it(text: str, want: tuple) -> None:
    assert read(text) == [want]


def test_what_the_rules_leave_alone() -> None:
    assert read("I love it!") == []  # a pronoun is no value
    assert read("I went to the lake yesterday.") == []  # events are a model's to read
    # An agent's own sentence is about no one; a named assistant is a person.
    assert read("I need to check the logs.", role="assistant") == []
    assert read("I need to check the logs.", role="assistant", named=True) == [
        ("todo", "check the logs", False)
    ]
    # Profile fields, one a line: a heading never takes the next line.
    assert read("About me:\nLocation: Oslo\nCompany: Initech") == [
        ("lives_in", "Oslo", False),
        ("works_at", "Initech", False),
    ]


def memory(value: str, at: datetime, *, negated: bool = False, nxt: Memory | None = None) -> Memory:
    return Memory(
        id=memory_id("Cora", "lives_in", value, negated, at),
        kind="fact",
        subject="Cora",
        attribute="lives_in",
        value=value,
        statement=f"Cora lives in {value}",
        confidence=0.5,
        certainty="candidate",
        single=True,
        negated=negated,
        at=at,
        updated_at=stamp(at),
        sources=["m1"],
        superseded_by=nxt.id if nxt else None,
        superseded_at=stamp(nxt.at) if nxt else None,
        thread="t",
        user="cora",
        agent="",
        tags={},
    )


def candidate(value: str, at: datetime, *, negated: bool = False) -> Candidate:
    return Candidate(
        kind="fact", subject="Cora", attribute="lives_in", value=value,
        statement=f"Cora lives in {value}", confidence=0.5, single=True, at=at,
        negated=negated, sources=["m9"],
    )  # fmt: skip


def test_a_retraction_of_a_more_detailed_value_supersedes_it() -> None:
    brno = memory("Brno, Czechia", T1)
    p = plan(candidate("Brno", T2, negated=True), [brno])
    assert p.op == "supersede" and p.links == [(brno.id, p.memory_id, T2)]


def test_a_retraction_of_another_value_changes_nothing_and_cites_nothing() -> None:
    munich = memory("Munich", T1)
    p = plan(candidate("Berlin", T2, negated=True), [munich])
    assert (p.op, p.memory_id, p.cite, p.links) == ("noop", munich.id, False, [])


def test_a_late_import_takes_its_place_in_the_timeline() -> None:
    munich = memory("Munich", T3)
    berlin = memory("Berlin", T1, nxt=munich)
    p = plan(candidate("Hamburg", T2), [berlin, munich])
    assert p.op == "supersede"
    # Berlin now ends at Hamburg, and Hamburg at Munich: Munich stays current.
    assert p.links == [(berlin.id, p.memory_id, T2)]
    assert p.inserted_link == (munich.id, T3)


def test_memories_of_one_second_follow_their_links() -> None:
    third = memory("Tromso", T1)
    second = memory("Bergen", T1, nxt=third)
    first = memory("Oslo", T1, nxt=second)
    assert [m.value for m in ordered([third, first, second])] == ["Oslo", "Bergen", "Tromso"]


def test_a_late_import_of_the_next_value_adds_no_copy_of_it() -> None:
    munich = memory("Munich", T3)
    berlin = memory("Berlin", T1, nxt=munich)
    p = plan(candidate("Munich", T2), [berlin, munich])
    assert (p.op, p.memory_id, p.links) == ("noop", munich.id, [])
