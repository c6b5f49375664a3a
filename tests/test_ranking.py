"""find's ordering (app/search/ranking.py): relevance from both stages'
scores, timeline context, dates named in questions, bounded recency; and
the same behaviour end to end through /v1/search."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app import tenancy
from app.search import ranking
from app.search.ranking import Candidate
from tests.test_pipeline import put, run_all

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def cand(note_id: str, *, text=None, cosine=None, at=T0, kind="note", ref=0) -> Candidate:
    return Candidate((note_id, kind, ref), at, at, text=text, cosine=cosine)


def rank(found: list[Candidate], stages="hybrid", neighbours=None, question="", half_life=0.0):
    by_key = {c.key: c for c in found}
    return ranking.rank(
        by_key,
        ranking.relevance(found, stages),
        neighbours=neighbours or {},
        question=ranking.Question.read(question),
        half_life_days=half_life,
    )


def order(scores: dict) -> list[str]:
    return [k[0] for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def test_relevance_blends_scores_not_ranks() -> None:
    # b is barely behind a by words but far closer in meaning: b wins. Rank
    # fusion scored them by place alone.
    a = cand("a", text=10.0, cosine=0.20)
    b = cand("b", text=9.5, cosine=0.60)
    c = cand("c", cosine=0.55)  # no shared word
    base = ranking.relevance([a, b, c], "hybrid")
    assert base[b.key] > base[a.key] and base[b.key] > base[c.key]
    assert base[a.key] == pytest.approx(ranking.TEXT_SHARE + (1 - ranking.TEXT_SHARE) * 0.2)
    # one stage alone: its own score; negative cosines count as 0
    assert ranking.relevance([a, b], "text")[a.key] == 1.0
    assert ranking.relevance([cand("n", cosine=-0.3)], "vector")[("n", "note", 0)] == 0.0


def test_a_lone_perfect_match_scores_one_and_context_is_capped_when_shown() -> None:
    scores = rank([cand("a", text=3.0, cosine=1.0)], half_life=30)
    assert scores[("a", "note", 0)] == pytest.approx(1.0)
    assert ranking.shown(1.37) == 1.0 and ranking.shown(0.1234567) == 0.123457


def test_the_turn_after_a_match_comes_with_it() -> None:
    # t2 answers the question t1 asked; an unrelated note, days later, is
    # closer in meaning than t2 but is nobody's neighbour.
    t1 = cand("t1", text=5.0, cosine=0.6)
    t2 = cand("t2", cosine=0.2)
    other = cand("other", cosine=0.45, at=T0 + timedelta(days=3))
    plain = rank([t1, t2, other])
    assert order(plain) == ["t1", "other", "t2"]
    # only t1's neighbours were looked up: the relation works both ways
    ctx = rank([t1, t2, other], neighbours={"t1": (None, "t2")})
    assert order(ctx) == ["t1", "t2", "other"]


def test_an_episode_lifts_its_notes_and_stops_at_the_gap() -> None:
    hit = cand("hit", cosine=0.8)
    same = cand("same", cosine=0.3, at=T0 + ranking.EPISODE_GAP / 2)
    later = cand("later", cosine=0.32, at=T0 + ranking.EPISODE_GAP * 3)
    scores = rank([hit, same, later])
    assert order(scores) == ["hit", "same", "later"]
    # parts are not episodes of their own
    part = cand("hit", kind="part", ref=1, cosine=0.31, at=T0)
    assert rank([hit, part])[part.key] < rank([hit, same])[same.key]


def test_a_date_in_the_question_prefers_notes_of_that_time() -> None:
    may = cand("may", cosine=0.40, at=datetime(2023, 5, 8, 9, tzinfo=UTC))
    june = cand("june", cosine=0.45, at=datetime(2023, 6, 20, tzinfo=UTC))
    question = "What did Caroline do on 8 May, 2023?"
    assert order(rank([may, june], question=question)) == ["may", "june"]
    assert order(rank([may, june])) == ["june", "may"]


def test_a_tag_value_the_question_names_counts() -> None:
    def note(note_id: str, *tags: str) -> Candidate:
        return Candidate((note_id, "note", 0), T0, T0, cosine=0.5, tags=frozenset(tags))

    q = ranking.Question.read("What did Maria Lopez adopt last year?")
    assert q.names(frozenset({"maria lopez"})) and q.names(frozenset({"Maria"}))
    assert not q.names(frozenset({"maria garcia"}))  # every word of the value
    assert not q.names(frozenset({"a", "1"}))  # too short to mean anything
    far = timedelta(days=9)  # separate episodes
    a, b = note("a", "maria"), note("b", "john")
    b.created_at = b.updated_at = T0 + far
    scores = rank([a, b], question="What did Maria adopt?")
    assert scores[a.key] - scores[b.key] == pytest.approx(ranking.TAG_WEIGHT / ranking.SCALE)


@pytest.mark.parametrize(
    ("question", "spans"),
    [
        ("on 8 May, 2023", [(datetime(2023, 5, 7), datetime(2023, 5, 10))]),
        ("on the 8th of May 2023", [(datetime(2023, 5, 7), datetime(2023, 5, 10))]),
        ("May 8th, 2023", [(datetime(2023, 5, 7), datetime(2023, 5, 10))]),
        (
            "in July 2023 and Sept. 2022",
            [
                (datetime(2023, 7, 1), datetime(2023, 8, 1)),
                (datetime(2022, 9, 1), datetime(2022, 10, 1)),
            ],
        ),
        ("in December, 2023", [(datetime(2023, 12, 1), datetime(2024, 1, 1))]),
        ("since 2023-05-08", [(datetime(2023, 5, 7), datetime(2023, 5, 10))]),
        ("in 2023-02", [(datetime(2023, 2, 1), datetime(2023, 3, 1))]),
        # no year, no span; not a date; a word that is not a month
        ("on Aug 15th", []),
        ("on 31 February 2023", []),
        ("the whole of 2023", []),
        ("March of the penguins", []),
    ],
)
def test_question_dates(question: str, spans: list[tuple[datetime, datetime]]) -> None:
    want = [(a.replace(tzinfo=UTC), b.replace(tzinfo=UTC)) for a, b in spans]
    assert ranking.question_dates(question) == want


def test_recency_is_a_bounded_bonus_relative_to_the_newest_candidate() -> None:
    years = timedelta(days=3 * 365)
    old = cand("old", cosine=0.5, at=T0 - years)
    older = cand("older", cosine=0.5, at=T0 - years - timedelta(days=30))
    better_old = cand("better", cosine=0.52, at=T0 - years - timedelta(days=60))
    scores = rank([old, older, better_old], half_life=30)
    # equally relevant: the newer first, though both are years old
    assert scores[old.key] > scores[older.key]
    # a little more relevant beats newer: recency informs, never overrides
    assert order(scores)[0] == "better"
    assert scores[old.key] - scores[older.key] == pytest.approx(
        ranking.RECENCY_WEIGHT / 2 / ranking.SCALE
    )
    off = rank([old, older], half_life=0)
    assert off[old.key] == off[older.key]


# -- end to end -----------------------------------------------------------------------


async def find(client, tenant, **body) -> list[str]:
    r = await client.post("/v1/search", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return [n["id"] for n in r.json()["notes"]]


async def test_find_brings_the_answer_after_the_matching_turn(
    client, tenant, make_pipeline
) -> None:
    session = "2023-05-08T13:56:00"
    turns = [
        ("chat:8", "Ann: Good morning! How was the weekend?"),
        ("chat:9", "Bo: Did you ever find a new apartment near the river?"),
        ("chat:10", "Ann: Yes, we signed the lease on Friday, moving in June."),
        ("chat:11", "Bo: That's great news, congratulations to you both."),
    ]
    for note_id, content in turns:
        speaker = content.split(":")[0]
        await put(
            client, tenant, id=note_id, content=content, created_at=session, tags={"who": speaker}
        )
    await put(client, tenant, id="later", content="Ann: The river walk was lovely today.")
    await run_all(make_pipeline(), client, tenant)
    found = await find(client, tenant, query="apartment near the river", limit=3)
    # chat:10 (natural order: after chat:9, not after chat:1...) shares no
    # word with the question but answers it
    assert found[:2] == ["chat:9", "chat:10"]
    # neighbours obey the filters: another speaker's turn never joins
    found = await find(
        client, tenant, query="apartment near the river", tags={"who": "Bo"}, limit=10
    )
    assert found[0] == "chat:9" and set(found) <= {"chat:9", "chat:11"}
    # and the question's date picks the session
    found = await find(client, tenant, query="What did Ann say on 8 May 2023?", limit=4)
    assert set(found) == {t for t, _ in turns}


async def test_timeline_neighbours_come_from_their_index(client, tenant, db) -> None:
    from datetime import timedelta as td

    from app.search import repository as repo
    from app.tenancy import scope_for_project

    await put(client, tenant, id="a", content="one")
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(text("SET LOCAL enable_seqscan = off"))
        project = await s.scalar(text("SELECT project_id FROM notes WHERE id = 'a'"))
        scope = scope_for_project(tenant.id, project, "default")
        # find's own planner settings, which its opening statement sets
        await repo.open_find(s, scope, model="m", candidates=200)
        stmt = repo.neighbours_query(scope, ["a"], filters=repo.Filters(), gap=td(hours=1))
        conn = await s.connection()
        compiled = stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        params = tuple(compiled.params[name] for name in compiled.positiontup or [])
        rows = await conn.exec_driver_sql("EXPLAIN " + str(compiled), params)
        plan = "\n".join(r[0] for r in rows)
    # one probe before, one after, each starting at the note itself: the order
    # comparison is an index condition (not a filter over every later note)
    probes = [
        line
        for line in plan.splitlines()
        if "Index Cond" in line and "ROW(created_at, keepmem_natural_key(id))" in line
    ]
    assert len(probes) == 2, plan


def test_episode_maxima_over_one_big_window() -> None:
    # a big import stamped with one time: every note's episode is all of them
    import random

    rng = random.Random(7)
    notes = [cand(f"n{i}", cosine=rng.random(), at=T0) for i in range(500)]
    notes += [cand("later", cosine=0.01, at=T0 + ranking.EPISODE_GAP * 2)]
    base = ranking.relevance(notes, "vector")
    best = ranking._episode_best({c.key: c for c in notes}, base)
    top = max(c.cosine for c in notes[:500])
    assert all(best[c.key] == top for c in notes[:500])
    assert best[("later", "note", 0)] == 0.01
    for n in (1, 2, 3, 7, 33):
        values = [rng.random() for _ in range(n)]
        query = ranking._range_max(values)
        assert all(
            query(lo, hi) == max(values[lo:hi]) for lo in range(n) for hi in range(lo + 1, n + 1)
        )


def test_context_lifts_results_but_does_not_make_them() -> None:
    hit = cand("hit", text=2.0)
    blank = Candidate(("blank", "note", 0), T0, T0, cosine=0.0, context_only=True)
    weak = Candidate(("weak", "note", 0), T0, T0, cosine=0.1, context_only=True)
    scores = rank([hit, blank, weak], neighbours={"hit": ("blank", "weak")})
    assert set(scores) == {hit.key, weak.key}
    # a stage's own hit stays a result however weak
    assert ("far", "note", 0) in rank([hit, cand("far", cosine=-0.2)])
