"""keepmem_client.langchain against a live keepmem: the retriever in an LCEL
chain (the memory reaches the model's prompt), within a token budget, with
tag and time filters, a thread's context, async; the tools remember, recall
and forget called directly and by a tool-calling model, a refused call an
error the agent sees; another tenant's key reaches nothing."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from keepmem_client import AsyncKeepmem, Keepmem
from keepmem_client.langchain import KeepmemRetriever, keepmem_tools, render_context
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from tests.test_sessions import digest

FERRY = "The ferry to Hollum leaves the harbour at seven every morning."
LIGHT = "The lighthouse on the north dune was painted red and white in 1912."
BAKERY = "The bakery on Dorpsstraat sells rye bread only on Saturdays."


class Recording(GenericFakeChatModel):
    """A scripted chat model that keeps every prompt it was given."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.prompts.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer from what you remember:\n{context}"), ("human", "{question}")]
)


def _chain(retriever: KeepmemRetriever, model: Recording) -> Any:
    context = retriever | render_context
    return (
        {"context": context, "question": RunnablePassthrough()} | PROMPT | model | StrOutputParser()
    )


def _prompt_text(model: Recording) -> str:
    return "\n".join(str(m.content) for m in model.prompts[-1])


def _by_name(tools: list[BaseTool]) -> dict[str, BaseTool]:
    return {t.name: t for t in tools}


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call-{uuid.uuid4().hex[:6]}", "type": "tool_call"}


async def test_the_retriever_in_a_chain_puts_memory_in_the_prompt(
    live_url, tenant, client, make_pipeline
) -> None:
    with Keepmem(live_url, tenant.key) as km:
        km.put(FERRY, id="ferry", tags={"topic": "sea"})
        km.put(LIGHT, id="light", tags={"topic": "sea"})
        km.put(BAKERY, id="bakery", tags={"topic": "land"})
        await digest(make_pipeline, client, tenant)

        retriever = KeepmemRetriever(client=km, limit=2)
        docs = retriever.invoke("When does the ferry leave the harbour?")
        assert docs[0].page_content == FERRY and docs[0].id == "ferry"
        meta = docs[0].metadata
        assert meta["id"] == "ferry" and meta["tags"]["topic"] == "sea" and meta["score"] > 0
        assert meta["created_at"] and meta["updated_at"]
        assert len(docs) <= 2

        model = Recording(messages=iter(["At seven."]))
        answer = _chain(retriever, model).invoke("When does the ferry leave the harbour?")
        assert answer == "At seven."
        prompt = _prompt_text(model)
        assert FERRY in prompt and "[ferry, " in prompt
        assert "When does the ferry leave the harbour?" in prompt


async def test_the_token_budget_is_honoured(live_url, tenant, client, make_pipeline) -> None:
    with Keepmem(live_url, tenant.key) as km:
        for i in range(8):
            text = (f"Lighthouse log {i}: the keeper trimmed the wick, wound the clockwork "
                    f"and noted the wind from the west at force {i} before the evening "
                    "watch began on the dune.")  # fmt: skip
            km.put(text, id=f"log-{i}", tags={"batch": "logs"})
        await digest(make_pipeline, client, tenant)
        question = "what did the lighthouse keeper log"
        everything = KeepmemRetriever(client=km, limit=8, filter={"batch": "logs"})
        full = everything.invoke(question)
        assert len(full) == 8

        budget = 120
        trimmed = KeepmemRetriever(
            client=km, limit=8, filter={"batch": "logs"}, token_budget=budget
        )
        fitted = trimmed.invoke(question)
        assert 1 <= len(fitted) < 8
        assert [d.id for d in fitted] == [d.id for d in full][: len(fitted)]  # the best ones
        assert len(render_context(fitted)) <= budget * 4  # ~4 characters a token
        assert all(d.metadata["date"] and len(d.page_content) <= 160 for d in fitted)
        # a larger budget per call fits more
        assert len(trimmed.invoke(question, token_budget=2000)) == 8

        # a thread's context, within the budget
        tid = f"t-{uuid.uuid4().hex[:8]}"
        line = "the tide table for week {} is pinned by the harbour office door by the ferry."
        says = [{"role": "user", "content": f"Note {i}: " + line.format(i)} for i in range(6)]
        km.add_messages(tid, says, user_id="ada", infer=False)
        km.remember("Ada prefers a window seat on the ferry.", user_id="ada")
        await digest(make_pipeline, client, tenant)
        wide = KeepmemRetriever(client=km, thread_id=tid, token_budget=2000).invoke("tide table")
        kinds = [d.metadata["type"] for d in wide]
        assert kinds[0] == "memory" and wide[0].page_content.startswith("Ada prefers")
        assert kinds.count("message") == 6
        narrow = KeepmemRetriever(client=km, thread_id=tid, token_budget=60).invoke("tide table")
        assert 1 <= len(narrow) < len(wide)


class Recorder(httpx.HTTPTransport):
    """The real transport, keeping each request's JSON body."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.content:
            self.bodies.append(json.loads(request.content))
        return super().handle_request(request)


async def test_filters_and_find_parameters_pass_through(
    live_url, tenant, client, make_pipeline
) -> None:
    recorder = Recorder()
    with Keepmem(live_url, tenant.key, transport=recorder) as km:
        km.put(FERRY, id="ferry", tags={"topic": "sea"})
        km.put(LIGHT, id="light", tags={"topic": "sea"})
        km.put(BAKERY, id="bakery", tags={"topic": "land"})
        km.put("The old ferry timetable of 2019 had no Sunday boat.", id="old",
               tags={"topic": "sea"}, created_at="2019-05-01T00:00:00Z")  # fmt: skip
        await digest(make_pipeline, client, tenant)
        question = "ferry bread lighthouse timetable"

        sea = KeepmemRetriever(client=km, filter={"topic": "sea"}).invoke(question)
        assert {d.id for d in sea} == {"ferry", "light", "old"}
        land = KeepmemRetriever(client=km, filter={"topic": "sea"}).invoke(
            question, tags={"topic": "land"}
        )
        assert [d.id for d in land] == ["bakery"]
        recent = KeepmemRetriever(client=km, filter={"topic": "sea"}, since="P30D").invoke(question)
        assert {d.id for d in recent} == {"ferry", "light"}
        before = KeepmemRetriever(client=km, until="2020-01-01").invoke(question)
        assert [d.id for d in before] == ["old"]

        recorder.bodies.clear()
        passing = KeepmemRetriever(
            client=km, limit=3, deep=True, search_kwargs={"stages": "text", "half_life_days": 0}
        )
        assert passing.invoke("ferry")
        sent = recorder.bodies[-1]
        assert sent["query"] == "ferry" and sent["limit"] == 3 and sent["deep"] is True
        assert sent["stages"] == "text" and sent["half_life_days"] == 0

    with pytest.raises(ValueError, match="go in filter="):
        KeepmemRetriever(client=km, tags={"topic": "sea"})
    with pytest.raises(ValueError, match="not find parameters"):
        KeepmemRetriever(client=km, search_kwargs={"colour": "red"})
    with pytest.raises(TypeError, match="not find parameters"):
        KeepmemRetriever(client=km).invoke("ferry", colour="red")
    with pytest.raises(ValueError, match="cite and token_budget"):
        KeepmemRetriever(client=km, cite=True).invoke("ferry", token_budget=100)


async def test_async_retrieval_with_citations(live_url, tenant, client, make_pipeline) -> None:
    async with AsyncKeepmem(live_url, tenant.key) as km:
        await km.update_settings(keep_text=True)
        await km.put(FERRY, id="ferry", tags={"topic": "sea"})
        await km.put(BAKERY, id="bakery", tags={"topic": "land"})
        await digest(make_pipeline, client, tenant)

        retriever = KeepmemRetriever(client=km, limit=1, cite=True)
        assert retriever.client is None and retriever.async_client is km
        docs = await retriever.ainvoke("When does the ferry leave?")
        assert [d.id for d in docs] == ["ferry"]
        citation = docs[0].metadata["citation"]
        assert citation["note"] == "ferry" and citation["quote"] in FERRY

        model = Recording(messages=iter(["Seven."]))
        assert await _chain(retriever, model).ainvoke("When does the ferry leave?") == "Seven."
        assert FERRY in _prompt_text(model) and BAKERY not in _prompt_text(model)
        with pytest.raises(RuntimeError, match="Keepmem client for sync use"):
            retriever.invoke("ferry")

    with Keepmem(live_url, tenant.key) as sync_km:  # async use of a sync client: off the loop
        docs = await KeepmemRetriever(client=sync_km, limit=1).ainvoke("rye bread")
        assert [d.id for d in docs] == ["bakery"]


async def test_the_tools_remember_recall_and_forget(
    live_url, tenant, client, make_pipeline
) -> None:
    with Keepmem(live_url, tenant.key) as km:
        tools = _by_name(keepmem_tools(km))
        spec = convert_to_openai_tool(tools["remember"])["function"]
        assert spec["parameters"]["required"] == ["content"]
        assert set(spec["parameters"]["properties"]) >= {"content", "id", "tags", "subject"}

        made = json.loads(tools["remember"].invoke({"content": "Ada's locker code is 4471.",
                                                    "tags": {"who": "ada"}}))  # fmt: skip
        assert made["op"] == "add" and made["memory"]["id"].startswith("mem/")
        memory_id = made["memory"]["id"]
        again = json.loads(tools["remember"].invoke({"content": "Ada's locker code is 4471."}))
        assert again["op"] == "noop" and again["memory"]["id"] == memory_id
        note = json.loads(tools["remember"].invoke({"content": FERRY, "id": "ferry"}))
        assert note["id"] == "ferry" and note["summary"] == FERRY
        await digest(make_pipeline, client, tenant)

        hits = json.loads(tools["recall"].invoke({"query": "locker code"}))
        assert hits[0]["id"] == memory_id and "4471" in hits[0]["text"]
        only = json.loads(tools["recall"].invoke({"query": "ferry", "tags": {"who": "ada"}}))
        assert [h["id"] for h in only] == [memory_id]
        compact = json.loads(tools["recall"].invoke({"query": "ferry", "token_budget": 200}))
        assert compact["results"][0]["id"] == "ferry" and compact["tokens"] <= 200

        gone = json.loads(tools["forget"].invoke({"id": memory_id}))
        assert gone["deleted"]
        hits = json.loads(tools["recall"].invoke({"query": "locker code"}))
        assert memory_id not in [h["id"] for h in hits]

        # a refused call: the agent reads keepmem's reason, marked as an error
        refused = tools["forget"].invoke(_call("forget", {"id": "no-such-note"}))
        assert isinstance(refused, ToolMessage) and refused.status == "error"
        assert "404 note_not_found" in str(refused.content)
        mixed = tools["remember"].invoke(_call("remember", {"content": "x", "id": "a",
                                                            "subject": "Ada"}))  # fmt: skip
        assert mixed.status == "error" and "leave out id" in str(mixed.content)
        strict = keepmem_tools(km)[2]
        strict.handle_tool_error = False
        with pytest.raises(ToolException, match="note_not_found"):
            strict.invoke({"id": "no-such-note"})


async def test_a_tool_calling_model_uses_the_tools(live_url, tenant, client, make_pipeline) -> None:
    """A scripted model calls remember, recall, forget, recall again and a
    forget that fails; each reply reaches its next prompt."""
    locker = {"content": "Ada's locker code is 4471.", "id": "locker"}
    script = [
        AIMessage(content="", tool_calls=[_call("remember", locker)]),
        AIMessage(content="", tool_calls=[_call("recall", {"query": "locker code"})]),
        AIMessage(content="", tool_calls=[_call("forget", {"id": "locker"})]),
        AIMessage(content="", tool_calls=[_call("recall", {"query": "locker code"})]),
        AIMessage(content="", tool_calls=[_call("forget", {"id": "locker"})]),
        AIMessage(content="Forgotten."),
    ]
    model = Recording(messages=iter(script))
    async with AsyncKeepmem(live_url, tenant.key) as km:
        tools = _by_name(keepmem_tools(km))
        history: list[BaseMessage] = [HumanMessage("Remember my locker code, then forget it.")]
        replies: list[ToolMessage] = []
        while True:
            said = await model.ainvoke(history)
            history.append(said)
            if not isinstance(said, AIMessage) or not said.tool_calls:
                break
            for call in said.tool_calls:
                reply = await tools[call["name"]].ainvoke(call)
                history.append(reply)
                replies.append(reply)
            await digest(make_pipeline, client, tenant)

    assert said.content == "Forgotten."
    stored, found, forgot, after, failed = replies
    assert json.loads(str(stored.content))["id"] == "locker" and stored.status == "success"
    assert json.loads(str(found.content))[0]["id"] == "locker"
    assert json.loads(str(forgot.content))["deleted"]
    assert "locker" not in [h["id"] for h in json.loads(str(after.content))]
    assert failed.status == "error" and "note_not_found" in str(failed.content)
    last_prompt = model.prompts[-1]
    assert last_prompt[-1] is failed or last_prompt[-1] == failed
    assert any(isinstance(m, ToolMessage) and "4471" in str(m.content) for m in last_prompt)


async def test_another_tenant_reaches_nothing(
    live_url, tenant, other_tenant, client, make_pipeline
) -> None:
    with Keepmem(live_url, tenant.key) as mine:
        made = mine.remember("Ada's locker code is 4471.")
        mine.put(FERRY, id="ferry")
        await digest(make_pipeline, client, tenant)
    with Keepmem(live_url, other_tenant.key) as theirs:
        assert KeepmemRetriever(client=theirs).invoke("ferry locker code") == []
        tools = _by_name(keepmem_tools(theirs))
        assert json.loads(tools["recall"].invoke({"query": "ferry locker code"})) == []
        refused = tools["forget"].invoke(_call("forget", {"id": made.memory.id}))
        assert refused.status == "error" and "not_found" in str(refused.content)
    with Keepmem(live_url, tenant.key) as mine:
        ids = [d.id for d in KeepmemRetriever(client=mine).invoke("ferry locker code")]
        assert {made.memory.id, "ferry"} <= set(ids)
