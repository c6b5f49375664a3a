"""Drives mem0's real client (mem0ai's MemoryClient and AsyncMemoryClient)
against a live keepmem. Run by the mem0 virtualenv's python (``make
mem0-client``), never imported by the suite: it imports nothing of keepmem.

    python mem0_driver.py write <host> <key_a> <key_b>
    python mem0_driver.py read <host> <key_a> <key_b> <state.json>

``write`` adds memories for two users in tenant A and one in tenant B;
``read`` (after the test has run the worker's jobs) searches, lists, pages,
gets, updates, reads history, deletes, and checks that tenant B's client
cannot reach tenant A's memories. Each prints one JSON line for the test
to assert on.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from mem0 import AsyncMemoryClient, MemoryClient


def refused(call: Callable[[], Any]) -> str:
    """The mem0 exception class a call raised ("" when it did not raise)."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the class is the answer
        return type(exc).__name__
    return ""


def refusal(call: Callable[[], Any]) -> list[str]:
    """The mem0 exception class a call raised and the message it carries."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the class and message are the answer
        return [type(exc).__name__, str(getattr(exc, "message", exc))]
    return []


def ids(results: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in results]


def write(host: str, key_a: str, key_b: str) -> dict[str, Any]:
    a = MemoryClient(api_key=key_a, host=host)
    b = MemoryClient(api_key=key_b, host=host)
    hiking = a.add(
        [
            {"role": "user", "content": "I love hiking in the Alps"},
            {"role": "assistant", "content": "Noted: Alice hikes in the Alps"},
        ],
        user_id="alice",
        metadata={"source": "chat", "n": 1, "tags": ["outdoor"]},
        infer=False,
    )
    nurse = a.add("Alice works as a nurse in Lyon", user_id="alice", run_id="run-1", infer=False)
    tea = a.add("Bob prefers green tea over coffee", user_id="bob", agent_id="helper", infer=False)
    again = a.add(
        "Bob prefers green tea over coffee", user_id="bob", agent_id="helper", infer=False
    )
    opera = b.add("Alice likes opera and hiking", user_id="alice", infer=False)
    inferred = a.add(
        [{"role": "user", "content": "I live in Berlin and I like jazz."}], user_id="dora"
    )
    return {
        "hiking": hiking,
        "nurse": nurse,
        "tea": tea,
        "again": again,
        "opera": opera,
        "inferred": inferred,
        "ping": {"org_id": a.org_id, "project_id": a.project_id},
    }


def read(host: str, key_a: str, key_b: str, state: dict[str, Any]) -> dict[str, Any]:
    a = MemoryClient(api_key=key_a, host=host)
    b = MemoryClient(api_key=key_b, host=host)
    hiking_id = state["hiking"]["results"][0]["id"]
    tea_id = state["tea"]["results"][0]["id"]
    out: dict[str, Any] = {"hiking_id": hiking_id, "tea_id": tea_id}

    out["search_alice"] = a.search("hiking", filters={"user_id": "alice"})["results"]
    out["search_bob_or"] = a.search(
        "tea", filters={"OR": [{"user_id": "bob"}, {"agent_id": "nobody"}]}, top_k=5
    )["results"]
    out["search_alice_tea"] = a.search("green tea", filters={"user_id": "alice"})["results"]
    out["search_b"] = b.search("hiking", filters={"user_id": "alice"})["results"]
    out["search_run"] = a.search("nurse", filters={"AND": [{"user_id": "alice"}, {"run_id": "*"}]})[
        "results"
    ]
    out["search_meta"] = a.search("Alps", filters={"metadata": {"source": "chat"}})["results"]

    out["page1"] = a.get_all(filters={"user_id": "alice"}, page=1, page_size=2)
    out["page2"] = a.get_all(filters={"user_id": "alice"}, page=2, page_size=2)
    out["bob_all"] = a.get_all(filters={"user_id": "bob"})
    out["dora_all"] = a.get_all(filters={"user_id": "dora"})
    out["b_alice"] = b.get_all(filters={"user_id": "alice"})

    out["got"] = a.get(hiking_id)
    out["b_get"] = refused(lambda: b.get(hiking_id))
    out["b_update"] = refused(lambda: b.update(hiking_id, text="tenant B was here"))
    out["b_history"] = refused(lambda: b.history(hiking_id))
    out["b_delete"] = refused(lambda: b.delete(hiking_id))
    out["updated"] = a.update(
        hiking_id, text="I love hiking in the Dolomites", metadata={"source": "edit"}
    )
    out["history"] = a.history(hiking_id)
    out["after_b"] = a.get(hiking_id)
    out["users"] = a.users()

    out["deleted"] = a.delete(tea_id)
    out["tea_gone"] = refused(lambda: a.get(tea_id))

    extra = a.add(
        [{"role": "user", "content": "one to batch"}, {"role": "user", "content": "two to batch"}],
        user_id="erin",
        infer=False,
    )
    batch = ids(extra["results"])
    out["batch_update"] = a.batch_update(
        [
            {"memory_id": batch[0], "text": "one batched"},
            {"memory_id": batch[1], "metadata": {"k": 2}},
        ]
    )
    out["batched"] = [a.get(i) for i in batch]
    out["batch_delete"] = a.batch_delete([{"memory_id": i} for i in batch])
    out["batch_gone"] = [refused(lambda i=i: a.get(i)) for i in batch]

    out["delete_all"] = a.delete_all(user_id="alice")
    out["alice_after"] = a.get_all(filters={"user_id": "alice"})
    out["b_alice_after"] = b.get_all(filters={"user_id": "alice"})
    out["delete_users"] = a.delete_users(user_id="dora")
    out["dora_after"] = a.get_all(filters={"user_id": "dora"})
    # what mem0 offers and keepmem does not: refused, saying so
    out["not_offered"] = {
        "feedback": refusal(lambda: a.feedback(tea_id, feedback="POSITIVE")),
        "summary": refusal(lambda: a.get_summary()),
        "project": refusal(lambda: a.get_project()),
        "export": refusal(lambda: a.create_memory_export("{}", user_id="erin")),
    }
    out["async"] = asyncio.run(_async_calls(host, key_b))
    return out


async def _async_calls(host: str, key: str) -> dict[str, Any]:
    client = AsyncMemoryClient(api_key=key, host=host)
    async with client:
        added = await client.add("Carol keeps bees", user_id="carol", infer=False)
        found = await client.search("bees", filters={"user_id": "carol"})
        listed = await client.get_all(filters={"user_id": "carol"})
    return {"added": added, "found": found["results"], "listed": listed}


def main() -> None:
    mode, host, key_a, key_b = sys.argv[1:5]
    if mode == "write":
        result = write(host, key_a, key_b)
    else:
        with open(sys.argv[5]) as f:
            result = read(host, key_a, key_b, json.load(f))
    print(json.dumps(result))  # noqa: T201 - the output the test reads


if __name__ == "__main__":
    main()
