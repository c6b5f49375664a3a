"""Runs keep's named flows on keep-skill's own local store (sqlite and
Chroma in a temporary directory, not keepmem's backend), for
tests/test_flows_parity.py.

Runs in keep's own virtualenv. Reads one JSON object on stdin::

    {"notes": [{"id", "content", "tags"}, ...],   # in order; a repeated id is a new version
     "cases": [{"name", "state", "params", "budget", "resume"}, ...]}

writes the notes with ``Keeper.put``, then runs each case with
``Keeper.run_flow`` in the given order (``resume`` names an earlier case
whose cursor the run resumes), and prints one JSON object (the
last line): each case's FlowResult by name.

keep needs an embedding provider and nothing can be downloaded here, so
keep is pointed at an OpenAI-compatible ``/v1/embeddings`` server the test
runs (keepmem's own MiniLM behind it): the URL comes in OPENAI_BASE_URL,
read by the OpenAI SDK itself. It is not given as the provider's
``base_url``: keep 0.163.4 then names the model ``<model>@<url>`` and its
Chroma collection name (with an ``@``) is refused by Chroma. Summaries use
keep's ``truncate`` provider (no model).

    <keep-venv>/bin/python tests/keep_parity_driver.py HOME < spec.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

EMBEDDING_MODEL = "all-MiniLM-L6-v2"


def keeper(home: Path) -> Any:
    from keep.api import Keeper
    from keep.config import ProviderConfig, load_or_create_config

    home.mkdir(parents=True, exist_ok=True)
    os.environ["KEEP_CONFIG"] = str(home)
    config = load_or_create_config(home)
    config.embedding = ProviderConfig("openai", {"model": EMBEDDING_MODEL, "api_key": "local"})
    config.summarization = ProviderConfig("truncate")
    config.path = home / "store"
    return Keeper(config=config)


def answer(result: Any) -> dict[str, Any]:
    return {
        "status": result.status,
        "bindings": result.bindings,
        "data": result.data,
        "ticks": result.ticks,
        "history": list(result.history or []),
        "cursor": result.cursor,
        "tried_queries": list(getattr(result, "tried_queries", None) or []),
    }


def main() -> None:
    home = Path(sys.argv[1])
    spec = json.loads(sys.stdin.read())
    kp = keeper(home)
    for note in spec["notes"]:
        kp.put(note["content"], id=note["id"], tags=note.get("tags") or None)
    out: dict[str, Any] = {}
    for case in spec["cases"]:
        try:
            cursor = out[case["resume"]]["cursor"] if case.get("resume") else None
            ran = kp.run_flow(
                case["state"],
                params=case.get("params"),
                budget=case.get("budget"),
                cursor_token=cursor,
            )
            out[case["name"]] = answer(ran)
        except Exception as exc:  # noqa: BLE001 - the test shows what keep raised
            out[case["name"]] = {"exception": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out, default=str))  # noqa: T201 - the output


if __name__ == "__main__":
    main()
