"""The pipeline speaks to a hosted model in the project's own words: its
``.prompt/summarize/*`` and ``.prompt/analyze/*`` docs become the system
prompt (the most specific matching doc, the default as fallback, the
built-in prompt without any), and auto-tagging (off by default) classifies a
written note against the project's ``.tag/*`` docs with its ``.prompt/tag/*``
doc, writing only values the project has. Against a local server speaking
the OpenAI chat-completions wire format, which records every request."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import text

from app import tenancy
from app.notes.views import ItemView
from app.pipeline import autotag, prompt_docs
from app.providers.summarization.base import Summarizer
from app.providers.summarization.base import registry as summarizers
from app.providers.summarization.llm import SYSTEM
from tests.conftest import Tenant
from tests.test_pipeline import LONG, run_job
from tests.vendors import Vendor, VendorServer

WORK = ("embed", "summarize", "analyze", "auto_tag")


def doc(title: str, prompt: str, *, rules: str = "") -> str:
    """A prompt doc's text: a heading, optional match rules, the prompt."""
    return f"# {title}\n\nWritten for this test.\n\n{rules}\n\n## Prompt\n\n{prompt}\n"


def path(note_id: str) -> str:
    return "/v1/notes/" + quote(note_id, safe="")


async def put(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/notes", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def jobs(client: httpx.AsyncClient, headers: dict[str, str], **params: Any) -> list[dict]:
    r = await client.get("/v1/jobs", params={"limit": 200, **params}, headers=headers)
    assert r.status_code == 200, r.text
    return list(r.json()["jobs"])


async def work(pipeline, client, t: Tenant, headers: dict[str, str]) -> None:
    """Run the project's pending embed / summarize / analyze / auto-tag jobs,
    oldest first, until none is left (an embedding may queue auto-tagging)."""
    for _ in range(4):
        pending = [j for j in await jobs(client, headers, status="pending") if j["kind"] in WORK]
        if not pending:
            return
        for job in reversed(pending):
            assert await run_job(pipeline, t, job["id"]) == "done", job


def llm(server: VendorServer) -> Summarizer:
    return summarizers.create("openai", model="m-test", base_url=server.url + "/v1")


def chats(server: VendorServer, mentioning: str) -> list[tuple[str, str]]:
    """(system, user) of each chat request whose user message mentions the text."""
    out = []
    for request in server.vendor.requests:
        messages = request["body"]["messages"]
        if mentioning in messages[1]["content"]:
            out.append((messages[0]["content"], messages[1]["content"]))
    return out


async def set_setting(db, t: Tenant, slug: str, **values: Any) -> None:
    async with tenancy.tenant_id_transaction(db, t.id) as s:
        await s.execute(
            text("UPDATE projects SET settings = settings || CAST(:v AS jsonb) WHERE slug = :p"),
            {"v": json.dumps(values), "p": slug},
        )


async def result_of(client, headers, kind: str, note_id: str) -> dict[str, Any]:
    found = await jobs(client, headers, kind=kind, note_id=note_id, status="done")
    assert found, (kind, note_id)
    return dict(found[0]["result"])


# -- summaries ------------------------------------------------------------------------


async def test_each_project_summarises_with_its_own_prompt_doc(
    client, tenant, make_pipeline
) -> None:
    alpha, beta = tenant.headers, tenant.project("beta")
    alpha_prompt = "Summarise for the alpha team: one plain sentence, names first."
    beta_prompt = "Summarise for the beta team as a headline of at most ten words."
    await put(client, alpha, id=".prompt/summarize/default", content=doc("alpha", alpha_prompt))
    await put(client, beta, id=".prompt/summarize/default", content=doc("beta", beta_prompt))
    await put(client, alpha, id="diary", content=LONG)
    await put(client, beta, id="diary", content=LONG.replace("Caroline", "Carla"))
    with VendorServer(Vendor(summary="Model summary.")) as server:
        pipeline = make_pipeline(summarizer=llm(server))
        await work(pipeline, client, tenant, alpha)
        await work(pipeline, client, tenant, beta)
    assert [system for system, _ in chats(server, "Caroline went")] == [alpha_prompt]
    assert [system for system, _ in chats(server, "Carla went")] == [beta_prompt]
    # the length limit rides in the user message, the project's text as written
    assert "at most 200 characters" in chats(server, "Carla went")[0][1]
    got = (await client.get(path("diary"), headers=beta)).json()
    assert got["summary"] == "Model summary."
    done = await result_of(client, beta, "summarize", "diary")
    assert done["prompt"] == ".prompt/summarize/default"


async def test_the_most_specific_matching_doc_wins_and_no_doc_means_the_built_in(
    client, tenant, make_pipeline
) -> None:
    h = tenant.headers
    default, meeting, standup = "Default words.", "Meeting words.", "Core standup words."
    await put(client, h, id=".prompt/summarize/default", content=doc("d", default))
    await put(
        client, h, id=".prompt/summarize/meeting",
        content=doc("m", meeting, rules="topic=meeting\ntopic=minutes"),
    )  # fmt: skip
    await put(
        client, h, id=".prompt/summarize/standup",
        content=doc("s", standup, rules="topic=meeting team=core"),
    )  # fmt: skip
    await put(client, h, id="plain", content=LONG.replace("Caroline", "Ann"))
    await put(
        client, h, id="minutes", content=LONG.replace("Caroline", "Bea"), tags={"topic": "minutes"}
    )
    await put(
        client, h, id="core", content=LONG.replace("Caroline", "Cy"),
        tags={"topic": "meeting", "team": "core"},
    )  # fmt: skip
    with VendorServer() as server:
        pipeline = make_pipeline(summarizer=llm(server))
        await work(pipeline, client, tenant, h)
        assert chats(server, "Ann went")[0][0] == default
        assert chats(server, "Bea went")[0][0] == meeting
        assert chats(server, "Cy went")[0][0] == standup
        # a project without summarize docs: the built-in prompt
        listed = await client.get(
            "/v1/notes", params={"prefix": ".prompt/summarize/", "limit": 100}, headers=h
        )
        for note in listed.json()["notes"]:
            r = await client.delete(path(note["id"]), params={"delete_versions": "true"}, headers=h)
            assert r.status_code == 200, r.text
        await put(client, h, id="later", content=LONG.replace("Caroline", "Dee"))
        await work(pipeline, client, tenant, h)
        assert chats(server, "Dee went")[0][0] == SYSTEM.format(max_chars=200)
    assert (await result_of(client, h, "summarize", "later"))["prompt"] is None


async def test_analysis_uses_the_projects_analyze_doc(client, tenant, make_pipeline) -> None:
    h = tenant.headers
    analyze = "Name each section's subject in one line."
    await put(client, h, id=".prompt/analyze/default", content=doc("a", analyze))
    body = "\n\n".join(
        f"# Section {i}\n\n" + f"Paragraph about topic {i} with enough words to matter. " * 12
        for i in range(3)
    )
    await put(client, h, id="report", content=body, analyze=True)
    with VendorServer(Vendor(summary="A part.")) as server:
        await work(make_pipeline(summarizer=llm(server), part_target_chars=900), client, tenant, h)
        systems = [system for system, _ in chats(server, "Paragraph about topic")]
    assert systems.count(analyze) == 3  # one per part; the note's own summary is not
    assert len(systems) == 4
    assert (await result_of(client, h, "analyze", "report"))["prompt"] == ".prompt/analyze/default"


# -- auto-tagging ---------------------------------------------------------------------


async def constrained(client, db, t: Tenant, key: str, labels: dict[str, str]) -> None:
    """A constrained tag of the project with its value docs (``## Prompt``
    sections describe them); ``_constrained`` is set directly where a put
    cannot set it."""
    h = t.headers
    got = await put(
        client, h, id=f".tag/{key}", content=doc(key, f"What the note does ({key})."),
        tags={"_constrained": "true"},
    )  # fmt: skip
    if got["tags"].get("_constrained") != "true":
        async with tenancy.tenant_id_transaction(db, t.id) as s:
            await s.execute(
                text(
                    'UPDATE notes SET tags = tags || \'{"_constrained": "true"}\' '
                    "WHERE id = :id AND project_id IN "
                    "(SELECT id FROM projects WHERE slug = 'default')"
                ),
                {"id": f".tag/{key}"},
            )
    for value, description in labels.items():
        await put(client, h, id=f".tag/{key}/{value}", content=doc(value, description))


TAG_PROMPT = "Label the fragment with the project's tags.\n\n{taxonomy}\n\nAllowed: {valid_values}"
CONVERSATION = {"type": "conversation"}  # keep's .tag/act applies to conversations


async def test_auto_tag_is_off_by_default_and_makes_no_call(
    client, tenant, db, make_pipeline
) -> None:
    h = tenant.headers
    await constrained(client, db, tenant, "act", {"commitment": "A promise to act."})
    await put(
        client, h, id="promise", content="I will fix the login bug by Friday.", tags=CONVERSATION
    )
    with VendorServer(Vendor(summary='{"act": "commitment"}')) as server:
        await work(make_pipeline(summarizer=llm(server)), client, tenant, h)
        assert server.vendor.requests == []
        # on, but with an offline summarizer: nothing is queued, nothing guessed
        await set_setting(db, tenant, "default", auto_tag=True)
        await put(client, h, id="promise2", content="I will write the docs tomorrow.")
        await work(make_pipeline(), client, tenant, h)
        assert server.vendor.requests == []
    assert await jobs(client, h, kind="auto_tag") == []
    got = (await client.get(path("promise2"), headers=h)).json()
    assert "act" not in got["tags"]


async def test_auto_tag_writes_the_models_choice_from_the_projects_labels(
    client, tenant, db, make_pipeline
) -> None:
    h = tenant.headers
    await constrained(
        client, db, tenant, "act",
        {"commitment": "The speaker binds themselves to act.", "request": "Asks someone to act."},
    )  # fmt: skip
    await put(client, h, id=".prompt/tag/default", content=doc("tag", TAG_PROMPT))
    await set_setting(db, tenant, "default", auto_tag=True)
    said = ['{"act": "commitment"}', '```json\n{"act": "prophecy"}\n```', '{"act": "commitment"}']
    with VendorServer(Vendor(script=said)) as server:
        pipeline = make_pipeline(summarizer=llm(server))
        await put(
            client,
            h,
            id="promise",
            content="I will fix the login bug by Friday.",
            tags=CONVERSATION,
        )
        await work(pipeline, client, tenant, h)
        [(system, user)] = chats(server, "fix the login bug")
        assert system.startswith("Label the fragment with the project's tags.")
        assert "`commitment`: The speaker binds themselves to act." in system
        assert "act: " in system and "commitment" in system.split("Allowed: ")[1]
        assert "I will fix the login bug by Friday." in user
        got = (await client.get(path("promise"), headers=h)).json()
        assert got["tags"]["act"] == "commitment"
        done = await result_of(client, h, "auto_tag", "promise")
        assert done["prompt"] == ".prompt/tag/default" and done["tags"] == {"act": "commitment"}

        # an invented value is not written
        await put(
            client, h, id="omen", content="The stars say the release slips.", tags=CONVERSATION
        )
        await work(pipeline, client, tenant, h)
        got = (await client.get(path("omen"), headers=h)).json()
        assert "act" not in got["tags"]
        assert (await result_of(client, h, "auto_tag", "omen"))["rejected"] == ["act=prophecy"]

        # the writer's own value stands
        await put(
            client, h, id="asked", content="Please review my pull request today.",
            tags={**CONVERSATION, "act": "request"},
        )  # fmt: skip
        await work(pipeline, client, tenant, h)
        got = (await client.get(path("asked"), headers=h)).json()
        assert got["tags"]["act"] == "request"


async def test_a_malformed_reply_writes_nothing(client, tenant, db, make_pipeline) -> None:
    h = tenant.headers
    await constrained(client, db, tenant, "act", {"commitment": "A promise to act."})
    await set_setting(db, tenant, "default", auto_tag=True)
    with VendorServer(Vendor(script=["I would say this is a commitment."])) as server:
        await put(
            client, h, id="vague", content="I will call Sam about the invoice.", tags=CONVERSATION
        )
        await work(make_pipeline(summarizer=llm(server)), client, tenant, h)
        assert len(chats(server, "call Sam")) == 1
    got = (await client.get(path("vague"), headers=h)).json()
    assert "act" not in got["tags"]
    done = await result_of(client, h, "auto_tag", "vague")
    assert done["malformed"] is True and done["tags"] == {}


# -- the pure parts -------------------------------------------------------------------


def view(note_id: str, body: str, **tags: str) -> ItemView:
    return ItemView(id=note_id, summary=body, tags=tags, created_at="", updated_at="")


def test_a_rule_must_hold_entirely_and_more_pairs_rank_higher() -> None:
    docs = [
        view(".prompt/summarize/default", doc("d", "D")),
        view(".prompt/summarize/aaa", doc("a", "A")),  # another fallback: default wins
        view(".prompt/summarize/one", doc("o", "O", rules="topic=x")),
        view(".prompt/summarize/two", doc("t", "T", rules="topic=x team=y")),
        view(".prompt/summarize/mail", doc("m", "M"), scope="*@*"),
        view(".prompt/summarize/empty", "# no prompt section\n\ntopic=x"),
    ]

    def pick(note_id: str, **tags: Any) -> str:
        chosen = prompt_docs.choose(docs, "summarize", prompt_docs.Target(note_id, tags))
        assert chosen is not None
        return prompt_docs.prompt_section(chosen.summary)

    assert pick("n") == "D"
    assert pick("n", topic="x") == "O"
    assert pick("n", topic=["z", "x"], team="y") == "T"
    assert pick("n", team="y") == "D"
    assert pick("bob@example.com") == "M"
    assert prompt_docs.choose(docs[2:4], "summarize", prompt_docs.Target("n", {})) is None


def test_a_when_predicate_selects_by_the_notes_tags() -> None:
    docs = [
        view(".prompt/summarize/default", doc("d", "D")),
        view(".prompt/summarize/talk", doc("c", "C"), _when="'conversation' in item.tags.type"),
    ]
    target = prompt_docs.Target("n", {"type": "conversation"})
    chosen = prompt_docs.choose(docs, "summarize", target)
    assert chosen is not None and chosen.id == ".prompt/summarize/talk"
    chosen = prompt_docs.choose(docs, "summarize", prompt_docs.Target("n", {"type": "x"}))
    assert chosen is not None and chosen.id == ".prompt/summarize/default"


def test_replies_are_read_as_keeps_lines_or_json_and_checked_against_the_labels() -> None:
    specs = autotag.specs_from(
        [
            view(".tag/act", "# act", _constrained="true"),
            view(".tag/act/commitment", "# c"),
            view(".tag/act/request", "# r"),
            view(".tag/status", "# status", _constrained="true"),
            view(".tag/status/open", "# o"),
            view(".tag/topic", "# free"),  # not constrained: never a label
            view(".tag/topic/x", "# x"),
        ]
    )
    assert [s.key for s in specs] == ["act", "status"]
    read = autotag.read_reply
    assert read("1: act=commitment(0.9) status=open(0.5)", specs).tags == {"act": "commitment"}
    assert read('{"act": "Request", "topic": "x"}', specs).tags == {"act": "request"}
    assert read('{"act": "Request", "topic": "x"}', specs).rejected == ["topic=x"]
    assert read("1: NONE", specs).tags == {} and not read("NONE", specs).malformed
    assert read("{}", specs).tags == {} and not read("{}", specs).malformed
    assert read("commitment, I think", specs).malformed
    assert read('["act", "commitment"]', specs).malformed
    system = autotag.system_prompt("Tags: {valid_values}", specs)
    assert system == "Tags: act: commitment, request; status: open"
    assert "`request`" in autotag.system_prompt("No placeholders here.", specs)
