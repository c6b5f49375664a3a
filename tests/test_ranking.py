"""find's ordering (app/search/ranking.py): relevance from both stages'
scores, timeline context, dates named in questions, bounded recency; and
the same behaviour end to end through /v1/search."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app import tenancy
from app.search import ranking
from app.search.ranking import Candidate
from tests.test_pipeline import put, run_all

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def cand(note_id: str, *, text=None, cosine=None, at=T0, kind="note", ref=0, tags=()) -> Candidate:
    return Candidate((note_id, kind, ref), at, at, text=text, cosine=cosine, tags=frozenset(tags))


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


def test_a_word_of_the_question_is_not_a_full_match() -> None:
    # "how long should my replies be?": a note holds "long" (one of the two
    # searched words) and means nothing like it; the answer shares no word
    stray = cand("podcast", text=3.6, cosine=0.05)
    answer = cand("answer", cosine=0.32)
    full = 8.5  # what a note holding both words would score
    base = ranking.relevance([stray, answer], "hybrid", full_match=full)
    assert base[answer.key] > base[stray.key]
    # the text share is the note's share of the question, not of the best hit
    text_only = ranking.relevance([stray], "text", full_match=full)
    assert text_only[stray.key] == pytest.approx(3.6 / 8.5)
    assert ranking.relevance([stray], "text")[stray.key] == 1.0  # no full match known
    # a better-than-full hit (the words twice, a short note) is the yardstick
    assert ranking.relevance([cand("x", text=9.0)], "text", full_match=full)[("x", "note", 0)] == 1
    # a note not embedded yet: its cosine of 0 says nothing, its words count
    fresh = cand("fresh", text=3.6, cosine=0.0)
    fresh.embedded = False
    assert ranking.relevance([fresh], "hybrid", full_match=full)[fresh.key] == pytest.approx(
        ranking.TEXT_SHARE * 3.6 / 8.5
    )


def test_a_lone_perfect_match_scores_one_and_context_is_capped_when_shown() -> None:
    scores = rank([cand("a", text=3.0, cosine=1.0)], half_life=30)
    assert scores[("a", "note", 0)] == pytest.approx(1.0)
    assert ranking.shown(1.37) == 1.0 and ranking.shown(0.1234567) == 0.123457


def session(n: int, day: int, cosine: float = 0.1) -> list[Candidate]:
    """A session of turns, all at one moment, tagged with it."""
    at = T0 + timedelta(days=day)
    return [cand(f"s{n}t{i}", cosine=cosine, at=at, tags={f"session={n}"}) for i in range(6)]


def chained(*sessions: list[Candidate]) -> dict[str, tuple[str | None, str | None]]:
    """Timeline neighbours within each session, in order."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for turns in sessions:
        ids = [c.key[0] for c in turns]
        for i, note_id in enumerate(ids):
            out[note_id] = (ids[i - 1] if i else None, ids[i + 1] if i + 1 < len(ids) else None)
    return out


def test_the_turn_after_a_match_comes_with_it() -> None:
    # s1t1 asks what s1t2 answers; an unrelated note, days later, is closer
    # in meaning than s1t2 but is nobody's neighbour. The two sessions' turns
    # sit next to each other far more often than chance: evidence that a
    # session's turns belong together.
    one, two = session(1, day=0), session(2, day=1)
    t1, t2 = one[1], one[2]
    t1.text, t1.cosine, t2.cosine = 5.0, 0.6, 0.2
    other = cand("other", cosine=0.45, at=T0 + timedelta(days=3), tags={"session=3"})
    notes = [*one, *two, other]
    ctx = order(rank(notes, neighbours=chained(one, two)))
    assert ctx[:3] == [t1.key[0], t2.key[0], "other"]
    # the same notes without their sessions: nothing says they belong together
    for c in notes:
        c.tags = frozenset()
    bare = order(rank(notes, neighbours=chained(one, two)))
    assert bare.index("other") < bare.index(t2.key[0])
    # one pair alone sharing a session is no more than chance would give:
    # no evidence, no lift
    for c in (t1, t2):
        c.tags = frozenset({"session=1"})
    other.tags = frozenset({"session=3"})
    alone = order(rank([t1, t2, other], neighbours={t1.key[0]: (None, t2.key[0])}))
    assert alone == [t1.key[0], "other", t2.key[0]]


def test_being_written_next_to_a_match_is_no_evidence_by_itself() -> None:
    # the same notes without a shared session: an unrelated stream, where the
    # note after a match is just the next thing someone wrote
    t1 = cand("t1", text=5.0, cosine=0.6)
    t2 = cand("t2", cosine=0.2)
    other = cand("other", cosine=0.45, at=T0 + timedelta(days=3))
    scores = rank([t1, t2, other], neighbours={"t1": (None, "t2")})
    assert order(scores) == ["t1", "other", "t2"]
    # a tag that names the other note (a reply, a link) is evidence enough
    t2.tags = frozenset({"reply_to=t1"})
    assert order(rank([t1, t2, other], neighbours={"t1": (None, "t2")}))[1] == "t2"


def test_a_key_groups_when_neighbours_share_its_value_more_than_chance() -> None:
    # a dialogue imported at one time: sessions of four turns, speakers taking
    # turns, ids in order (chat:9 before chat:10: the natural order)
    def dialogue(ids: list[str]) -> dict[str, Candidate]:
        return {
            note_id: cand(
                note_id,
                cosine=0.3,
                tags={f"session={i // 4}", f"speaker={'ab'[i % 2]}", "kind=chat"},
            )
            for i, note_id in enumerate(ids)
        }

    grouping = ranking._grouping_keys(dialogue([f"chat:{i}" for i in range(16)]))
    # 12 of the 15 pairs share their session where chance gives 1 in 4
    assert 0.5 < grouping["session"] < 1.0
    # the speaker changes every turn (less than chance), and a tag every note
    # carries says nothing
    assert "speaker" not in grouping and "kind" not in grouping
    # the same turns under ids that do not give their order away (content
    # ids): neighbours share a session no more often than chance
    import random

    ids = [f"%{random.Random(i).getrandbits(48):012x}" for i in range(16)]
    assert "session" not in ranking._grouping_keys(dialogue(ids))
    # and pairs further apart than an episode are not neighbours
    spread = dialogue([f"chat:{i}" for i in range(16)])
    for i, c in enumerate(spread.values()):
        c.created_at = T0 + 2 * i * ranking.EPISODE_GAP
    assert ranking._grouping_keys(spread) == {}


def test_an_episode_lifts_its_notes_and_stops_at_the_gap() -> None:
    hit = cand("hit", cosine=0.8)
    same = cand("same", cosine=0.3, at=T0 + ranking.EPISODE_GAP / 2)
    later = cand("later", cosine=0.32, at=T0 + ranking.EPISODE_GAP * 3)
    days = [cand(f"day{i}", cosine=0.1, at=T0 + timedelta(days=i)) for i in range(1, 9)]
    scores = rank([hit, same, later, *days])
    assert order(scores)[:3] == ["hit", "same", "later"]
    # the same three alone: a window with most of the candidates in it is
    # no evidence of an episode (a burst of unrelated notes)
    assert order(rank([hit, same, later])) == ["hit", "later", "same"]
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
    assert q.names(frozenset({"who=maria lopez"})) and q.names(frozenset({"who=Maria"}))
    assert not q.names(frozenset({"who=maria garcia"}))  # every word of the value
    assert not q.names(frozenset({"n=a", "n=1"}))  # too short to mean anything
    assert not q.names(frozenset({"maria=no"}))  # the key is not its value
    # the bonus sorts notes that context lifts (here: replies to a hit each);
    # alone, a name on a note is no evidence (a speaker on half the turns)
    hits = [cand("h1", cosine=0.8), cand("h2", cosine=0.8, at=T0 + timedelta(days=9))]
    a, b = note("a", "who=maria", "re=h1"), note("b", "who=john", "re=h2")
    b.created_at = b.updated_at = T0 + timedelta(days=9)
    replies = {"h1": (None, "a"), "h2": (None, "b")}
    scores = rank([*hits, a, b], neighbours=replies, question="What did Maria adopt?")
    assert scores[a.key] - scores[b.key] == pytest.approx(ranking.TAG_WEIGHT / ranking.SCALE)
    scores = rank([a, b], question="What did Maria adopt?")
    assert scores[a.key] == pytest.approx(scores[b.key])


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
    # a conversation kept by session: the session tag is what says the turns
    # belong together (their time alone would not: a burst of unrelated
    # notes is written as close together)
    earlier = "2023-04-30T10:00:00"
    for n, content in enumerate(("Ann: The bakery opens at nine.", "Bo: Good to know.")):
        tags = {"who": content.split(":")[0], "session": "s1"}
        await put(
            client, tenant, id=f"chat:{n + 1}", content=content, created_at=earlier, tags=tags
        )
    session = "2023-05-08T13:56:00"
    turns = [
        ("chat:8", "Ann: Good morning! How was the weekend?"),
        ("chat:9", "Bo: Did you ever find a new apartment near the river?"),
        ("chat:10", "Ann: Yes, we signed the lease on Friday, moving in June."),
        ("chat:11", "Bo: That's great news, congratulations to you both."),
    ]
    for note_id, content in turns:
        tags = {"who": content.split(":")[0], "session": "s2"}
        await put(client, tenant, id=note_id, content=content, created_at=session, tags=tags)
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
    assert found[0] == "chat:9" and set(found) <= {"chat:1", "chat:2", "chat:9", "chat:11"}
    assert "chat:10" not in found
    # and among the turns the question's words find, its date picks the session
    found = await find(client, tenant, query="What did Ann and Bo say on 8 May 2023?", limit=4)
    assert set(found) == {t for t, _ in turns}


async def test_unrelated_notes_written_together_do_not_lift_each_other(
    client, tenant, make_pipeline
) -> None:
    # the issue's own store: two notes a second apart, nothing in common
    await put(
        client,
        tenant,
        id="staging",
        content="The deploy to staging failed because the Redis password was rotated on Tuesday.",
        created_at="2026-11-25T12:00:00Z",
    )
    await put(
        client,
        tenant,
        id="alice",
        content="Alice prefers PostgreSQL over MySQL for new services.",
        created_at="2026-11-25T12:00:01Z",
    )
    await run_all(make_pipeline(), client, tenant)
    r = await client.post(
        "/v1/search",
        json={"query": "why did staging break?", "explain": True},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    notes = {n["id"]: n for n in r.json()["notes"]}
    assert next(iter(notes)) == "staging"
    alice = notes["alice"]
    assert alice["explain"]["vector"] < 0.1 and alice["explain"]["bm25"] is None
    assert alice["score"] <= 0.2, alice
    assert alice["explain"]["neighbour"] == 0 and alice["explain"]["episode"] == 0
    # keep's query-resolve reads the scores as they are: one clear answer
    # (its margin over the next clears margin_high) ends it at its first search
    r = await client.post(
        "/v1/flow",
        json={"state": "query-resolve", "params": {"query": "why did staging break?"}},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "done" and out["history"] == ["query-resolve"], out
    assert out["data"]["search"]["results"][0]["id"] == "staging"
    assert out["data"]["search"]["margin"] > 0.15


async def test_timeline_neighbours_come_from_their_index(client, tenant, db) -> None:
    from datetime import timedelta as td

    from app.db import driver
    from app.search import repository as repo
    from app.tenancy import scope_for_project

    await put(client, tenant, id="a", content="one")
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(text("SET LOCAL enable_seqscan = off"))
        project = await s.scalar(text("SELECT project_id FROM notes WHERE id = 'a'"))
        scope = scope_for_project(tenant.id, project, "default")
        # find's own planner settings, which its opening statement sets
        await repo.open_find(s, scope, model="m", candidates=200)
        sql, params = repo.neighbours_sql(scope, ["a"], filters=repo.Filters(), gap=td(hours=1))
        rows = await (await driver(s)).fetch("EXPLAIN " + sql, *params)
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
    # a big import stamped with one time: every note's episode is all of
    # them, and a window that holds (nearly) every candidate is no evidence
    import random

    rng = random.Random(7)
    notes = [cand(f"n{i}", cosine=rng.random(), at=T0) for i in range(500)]
    notes += [cand("later", cosine=0.01, at=T0 + ranking.EPISODE_GAP * 2)]
    base = ranking.relevance(notes, "vector")
    best = ranking._episode_best({c.key: c for c in notes}, base)
    top = max(c.cosine for c in notes[:500])
    assert all(best[c.key] == pytest.approx(max(c.cosine, top / 501)) for c in notes[:500])
    assert best[("later", "note", 0)] == pytest.approx(0.01)
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


def test_a_note_unrelated_to_the_question_scores_low_whatever_its_context() -> None:
    # Stores where everything conspires to lift the unrelated notes: one
    # session, reply tags pointing at the best hit, written on the day the
    # question names, tagged with a name the question says, the newest.
    import random

    rng = random.Random(31)
    question = "What did Maria say about the trip on 8 May, 2023?"
    for _ in range(200):
        n = rng.randint(2, 40)
        notes = []
        for i in range(n):
            unrelated = rng.random() < 0.5
            notes.append(
                cand(
                    f"n{i}",
                    text=None if unrelated or rng.random() < 0.5 else rng.uniform(0.1, 9),
                    cosine=rng.uniform(-0.2, 0.0999) if unrelated else rng.uniform(0.1, 1),
                    at=T0 + timedelta(minutes=rng.randint(0, 90)),
                    tags={"session=one", "who=maria", "reply_to=n0"},
                )
            )
        ids = [c.key[0] for c in notes]
        neighbours = {a: (None, b) for a, b in itertools.pairwise(ids)}
        scores = rank(notes, neighbours=neighbours, question=question, half_life=30)
        for c in notes:
            if c.text is None and c.cosine < 0.1 and c.key in scores:
                assert scores[c.key] <= 0.2, (c, scores[c.key])
