"""Threads and memories through the SDK (sync and async, over a live
server): messages in, the worker's extraction run, memories read back
current, as of a time and with their history; ``remember`` reconciled (a
restatement leaves one memory); the thread's context block; find passing
``include_superseded`` and ``as_of`` through; typed errors; what is retried."""

from __future__ import annotations

import uuid

import pytest
from keepmem_client import (
    AsyncKeepmem,
    BadRequestError,
    Keepmem,
    Memory,
    MemoryDetail,
    NotFoundError,
    ServiceUnavailableError,
    ValidationError,
)

from tests.conftest import Tenant
from tests.test_sessions import digest
from tests.test_sessions_sdk import _down

BERLIN = {"role": "user", "name": "Alice", "content": "I live in Berlin.",
          "time": "2024-01-10T09:00:00Z"}  # fmt: skip
REPLY = {"role": "assistant", "content": "Berlin is lovely in spring.",
         "time": "2024-01-10T09:00:05Z"}  # fmt: skip
MUNICH = {"role": "user", "name": "Alice", "content": "I moved to Munich last month.",
          "time": "2024-03-01T10:00:00Z"}  # fmt: skip


def _tid() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _lives_in(found: list[Memory]) -> list[tuple[str, bool]]:
    return [(m.value, m.current) for m in found if m.attribute == "lives_in"]


async def test_sync_client_messages_become_memories(
    live_url, tenant, client, make_pipeline
) -> None:
    tid = _tid()
    with Keepmem(live_url, tenant.key) as km:
        first = km.add_messages(tid, [BERLIN, REPLY], user_id="alice", agent_id="helper")
        assert first.thread_id == tid and first.extraction == "queued"
        assert first.messages == [f"thread/{tid}/000000", f"thread/{tid}/000001"]
        # a batch that arrives while the job waits joins it: one extraction
        later = km.add_messages(tid, [MUNICH], user_id="alice")
        assert later.extraction == "joined" and later.messages == [f"thread/{tid}/000002"]
        waiting = km.thread(tid)
        assert (waiting.messages, waiting.waiting, waiting.user_id) == (3, 3, "alice")
        await digest(make_pipeline, client, tenant)

        t = km.thread(tid)
        assert (t.messages, t.extracted, t.waiting) == (3, 3, 0) and t.memories_made >= 2
        assert [x.id for x in km.threads(user_id="alice")] == [tid]
        assert km.threads(user_id="bob") == []
        whole = km.thread_messages(tid)
        assert [x.content for x in whole.messages] == [
            "Alice: I live in Berlin.",
            REPLY["content"],
            "Alice: I moved to Munich last month.",
        ]
        assert whole.messages[0].speaker == "Alice" and whole.messages[1].role == "assistant"
        assert whole.next_cursor is None
        page = km.thread_messages(tid, limit=2)
        assert len(page.messages) == 2 and page.next_cursor
        rest = km.thread_messages(tid, cursor=page.next_cursor)
        paged = [x.id for x in page.messages + rest.messages]
        assert sorted(paged) == [x.id for x in whole.messages] and rest.next_cursor is None

        # what is believed now, then, and everything
        now = km.memories(user_id="alice")
        assert _lives_in(now) == [("Munich", True)]
        (munich,) = [m for m in now if m.attribute == "lives_in"]
        assert munich.subject == "Alice" and munich.certainty == "candidate"
        assert munich.sources == [f"thread/{tid}/000002"] and munich.thread_id == tid
        # believed then (and superseded since: ``current`` is about now)
        assert _lives_in(km.memories(user_id="alice", as_of="2024-02-01T00:00:00Z")) == [
            ("Berlin", False)
        ]
        assert _lives_in(km.memories(user_id="alice", as_of="2023-12-31")) == []
        every = km.memories(subject="Alice", include_superseded=True)
        assert sorted(_lives_in(every)) == [("Berlin", False), ("Munich", True)]
        assert _lives_in(km.thread_memories(tid)) == [("Munich", True)]
        assert sorted(_lives_in(km.thread_memories(tid, include_superseded=True))) == [
            ("Berlin", False),
            ("Munich", True),
        ]
        assert km.memories(user_id="alice", kind="task") == []
        assert len(km.memories(subject="Alice", include_superseded=True, limit=1)) == 1

        # one memory: its sources and its slot's history, by an id holding "/"
        (berlin,) = [m for m in every if m.value == "Berlin"]
        assert berlin.id.startswith("mem/") and berlin.superseded_by == munich.id
        detail = km.memory(berlin.id)
        assert isinstance(detail, MemoryDetail) and detail.current is False
        assert [s.id for s in detail.source_messages] == [f"thread/{tid}/000000"]
        assert detail.source_messages[0].exists
        assert detail.source_messages[0].summary == "Alice: I live in Berlin."
        assert [(h.value, h.current) for h in detail.history] == [
            ("Berlin", False),
            ("Munich", True),
        ]
        assert detail.versions == []  # never reworded

        # the block for a prompt: what is true now, then what was said
        block = km.thread_context(tid, query="Where does Alice live?")
        assert block.thread_id == tid and "Alice lives in Munich (unconfirmed)" in block.context
        assert "Alice lives in Berlin" not in block.context
        assert any(x.id == f"thread/{tid}/000002" for x in block.messages)
        small = km.thread_context(tid, token_budget=50)
        assert small.tokens <= 50 and small.truncated

        # find hides the superseded memory unless asked, and finds the past
        tags = {"subject": "Alice", "attribute": "lives_in"}
        found = km.find("Alice lives in", tags=tags, stages="text")
        assert [n.id for n in found.notes] == [munich.id]
        found = km.find("Alice lives in", tags=tags, stages="text", include_superseded=True)
        assert {n.id for n in found.notes} == {munich.id, berlin.id}
        found = km.find_compact("Alice lives in", tags=tags, stages="text", as_of="2024-02-01")
        assert [r.id for r in found.results] == [berlin.id]

        # the extraction budget and its spend
        assert km.memory_settings().provider == "none"
        assert km.set_memory_settings(1000).llm_tokens_per_day == 1000
        assert km.memory_settings().llm_tokens_per_day == 1000
        server = km.set_memory_settings(None).llm_tokens_per_day
        assert server > 1000
        spend = km.memory_spend()
        assert (spend.calls, spend.tokens_in, spend.budget) == (0, 0, server)

        # forgetting the thread: its messages, and asked for, its memories
        gone = km.delete_thread(tid, memories=True)
        assert (gone.thread_id, gone.messages) == (tid, 3) and gone.memories >= 2
        assert km.memories(subject="Alice", include_superseded=True) == []
        with pytest.raises(NotFoundError):
            km.thread(tid)


async def test_async_client_remember_is_reconciled(live_url, tenant, client, make_pipeline) -> None:
    async with AsyncKeepmem(live_url, tenant.key) as km:
        said = "Alice keeps her bicycle in the courtyard."
        first = await km.remember(said, subject="Alice", tags={"source": "agent"})
        assert first.op == "add" and first.superseded == []
        assert first.memory.statement == said and first.memory.certainty == "fact"
        again = await km.remember(said, subject="Alice")
        assert again.op == "noop" and again.memory.id == first.memory.id
        kept = await km.memories(subject="Alice")
        assert [m.statement for m in kept] == [said]

        acme = await km.remember(
            "Alice works at Acme.", subject="Alice", attribute="works_at", value="Acme",
            valid_at="2024-01-01", user_id="alice",
        )  # fmt: skip
        assert acme.op == "add" and acme.memory.value == "Acme"
        globex = await km.remember(
            "Alice works at Globex.", subject="Alice", attribute="works_at", value="Globex",
            valid_at="2024-06-01", user_id="alice",
        )  # fmt: skip
        assert globex.op == "supersede" and globex.superseded == [acme.memory.id]
        old = await km.memory(acme.memory.id)
        assert old.current is False and old.superseded_by == globex.memory.id
        assert [h.value for h in old.history] == ["Acme", "Globex"]
        jobs = await km.memories(user_id="alice", kind="fact")
        assert [(m.value, m.current) for m in jobs] == [("Globex", True)]
        then = await km.memories(user_id="alice", as_of="2024-03-01T00:00:00Z")
        assert [m.value for m in then] == ["Acme"]

        tid = _tid()
        added = await km.add_messages(tid, [BERLIN], user_id="alice", infer=False)
        assert added.extraction == "off"
        await digest(make_pipeline, client, tenant)
        t = await km.thread(tid)
        assert (t.messages, t.waiting, t.memories_made) == (1, 0, 0)
        assert await km.thread_memories(tid) == []
        page = await km.thread_messages(tid)
        assert [m.content for m in page.messages] == ["Alice: I live in Berlin."]
        assert [x.id for x in await km.threads(user_id="alice", limit=5)] == [tid]
        block = await km.thread_context(tid)
        assert "Alice works at Globex." in block.context and "I live in Berlin" in block.context
        assert (await km.memory_settings()).llm_tokens_per_day > 0
        assert (await km.memory_spend()).refused == 0


async def test_errors_are_typed(
    live_url, tenant: Tenant, other_tenant: Tenant, client, make_pipeline
) -> None:
    tid = _tid()
    with Keepmem(live_url, tenant.key) as mine:
        mine.add_messages(tid, [BERLIN], user_id="alice")
        made = mine.remember("Alice likes tea.", subject="Alice")
        assert mine.thread(tid).id == tid
    with Keepmem(live_url, other_tenant.key) as theirs:
        for read in (
            lambda: theirs.thread(tid),
            lambda: theirs.thread_messages(tid),
            lambda: theirs.thread_memories(tid),
            lambda: theirs.thread_context(tid),
            lambda: theirs.memory(made.memory.id),
        ):
            with pytest.raises(NotFoundError) as missing:
                read()
            assert missing.value.status == 404 and missing.value.code == "note_not_found"
        assert "not found" in missing.value.message
        assert theirs.threads() == [] and theirs.memories() == []

        with pytest.raises(ValidationError) as wrong:
            theirs.add_messages(tid, [{"role": "narrator", "content": "Once upon a time"}])
        assert wrong.value.status == 422 and "role" in wrong.value.message
        with pytest.raises(ValidationError):
            theirs.add_messages(tid, [])
        with pytest.raises(BadRequestError) as bad:
            theirs.add_messages(tid, [{**BERLIN, "time": "the day before yesterday"}])
        assert bad.value.status == 400 and "invalid time" in bad.value.message
        # a refused batch stores nothing: the thread was never made
        with pytest.raises(NotFoundError):
            theirs.thread(tid)
        with pytest.raises(BadRequestError) as bad:
            theirs.remember("Alice likes tea.", attribute="likes")
        assert "attribute and value together" in bad.value.message
        with pytest.raises(BadRequestError) as bad:
            theirs.memories(as_of="soon")
        assert "invalid as_of" in bad.value.message
        with pytest.raises(ValidationError):
            theirs.memories(kind="weather")
        with pytest.raises(NotFoundError):
            theirs.memory("mem/0000000000000000")
    async with AsyncKeepmem(live_url, other_tenant.key) as theirs_async:
        with pytest.raises(NotFoundError) as missing:
            await theirs_async.thread(tid)
        assert missing.value.code == "note_not_found"
        with pytest.raises(ValidationError) as wrong:
            await theirs_async.remember("")
        assert "statement" in wrong.value.message


def test_reads_are_retried_and_writes_are_not() -> None:
    with _down() as (url, seen), Keepmem(url, "k", max_retries=1) as km:
        for read in (
            lambda: km.memory("mem/abc123"),
            lambda: km.memories(user_id="alice"),
            lambda: km.thread_context("t1", query="where"),
        ):
            with pytest.raises(ServiceUnavailableError):
                read()
        # the memory id is one path segment, its "/" quoted
        assert seen == [
            "GET /v1/memories/mem%2Fabc123",
            "GET /v1/memories/mem%2Fabc123",
            "GET /v1/memories",
            "GET /v1/memories",
            "GET /v1/threads/t1/context",
            "GET /v1/threads/t1/context",
        ]
        seen.clear()
        for write in (
            lambda: km.add_messages("t1", [{"role": "user", "content": "hi"}]),
            lambda: km.remember("Alice likes tea."),
            lambda: km.set_memory_settings(10),
        ):
            with pytest.raises(ServiceUnavailableError):
                write()
        assert seen == [
            "POST /v1/threads/t1/messages",
            "POST /v1/memories",
            "PATCH /v1/memories/settings",
        ]
