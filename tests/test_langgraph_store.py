"""KeepmemStore: LangGraph's BaseStore on keepmem, sync and async, and in a
small LangGraph graph."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

import httpx
from keepmem_client import AsyncKeepmem, Keepmem
from keepmem_client.langgraph import KeepmemStore
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore


def test_store_behaviours_sync(live_url, tenant) -> None:
    with Keepmem(live_url, tenant.key, project="lg-sync") as km:
        store = KeepmemStore(km)
        store.put(("users", "ada"), "prefs", {"theme": "dark", "lang": "en"})
        store.put(("users", "ada"), "trip", {"text": "Ferry to the island at seven"})
        store.put(("users", "bo"), "prefs", {"theme": "light"})
        got = store.get(("users", "ada"), "prefs")
        assert got is not None and got.value == {"theme": "dark", "lang": "en"}
        assert got.namespace == ("users", "ada") and got.key == "prefs"
        assert store.get(("users", "ada"), "missing") is None
        listed = store.search(("users",))
        assert {(i.namespace, i.key) for i in listed} == {
            (("users", "ada"), "prefs"), (("users", "ada"), "trip"), (("users", "bo"), "prefs")
        }  # fmt: skip
        dark = store.search(("users",), filter={"theme": "dark"})
        assert [i.namespace for i in dark] == [("users", "ada")]
        found = store.search(("users", "ada"), query="ferry island")
        assert found and found[0].key == "trip"
        assert store.list_namespaces(prefix=("users",)) == [("users", "ada"), ("users", "bo")]
        assert store.list_namespaces(max_depth=1) == [("users",)]
        store.put(("users", "ada"), "prefs", {"theme": "solarized"})  # update
        assert store.get(("users", "ada"), "prefs").value == {"theme": "solarized"}
        store.delete(("users", "bo"), "prefs")
        assert store.get(("users", "bo"), "prefs") is None


async def test_store_behaviours_async(live_url, tenant) -> None:
    async with AsyncKeepmem(live_url, tenant.key, project="lg-async") as km:
        store = KeepmemStore(aclient=km)
        await store.aput(("docs",), "a", {"text": "Tides turn every six hours"})
        assert (await store.aget(("docs",), "a")).value["text"].startswith("Tides")
        assert [i.key for i in await store.asearch(("docs",))] == ["a"]
        assert await store.alist_namespaces() == [("docs",)]
        await store.adelete(("docs",), "a")
        assert await store.aget(("docs",), "a") is None


class State(TypedDict):
    question: str
    notes: Annotated[list[str], operator.add]


def test_a_langgraph_graph_remembers_across_runs(live_url, tenant) -> None:
    """Two runs of a graph: the first stores what it learned, the second
    finds it again through the store."""

    def learn(state: State, *, store: BaseStore) -> dict:
        store.put(("memories", "user-1"), "fact", {"text": state["question"]})
        return {"notes": ["stored"]}

    def recall(state: State, *, store: BaseStore) -> dict:
        hits = store.search(("memories", "user-1"))
        return {"notes": [h.value["text"] for h in hits]}

    builder = StateGraph(State)
    builder.add_node("learn", learn)
    builder.add_node("recall", recall)
    builder.add_edge(START, "learn")
    builder.add_edge("learn", "recall")
    builder.add_edge("recall", END)
    with Keepmem(live_url, tenant.key, project="lg-graph") as km:
        graph = builder.compile(store=KeepmemStore(km))
        out = graph.invoke({"question": "The user prefers window seats", "notes": []})
        assert out["notes"] == ["stored", "The user prefers window seats"]
    r = httpx.get(
        f"{live_url}/v1/notes",
        params={"prefix": "lg/memories/"},
        headers={**tenant.headers, "X-Project": "lg-graph"},
    )
    assert [n["id"] for n in r.json()["notes"]] == ["lg/memories/user-1/fact"]
