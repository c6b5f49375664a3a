"""Drives the real keep client (keep-skill 0.163.4) against a keepmem server.

Runs in keep's own virtualenv (tests/test_keep_client.py starts it), never in
keepmem's, and prints one JSON object: what each call returned.

    <keep-venv>/bin/python tests/keep_driver.py remote|verify|sync|mcp URL KEY
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any


def _item(item: Any) -> dict[str, Any] | None:
    if item is None:
        return None
    return {"id": item.id, "summary": item.summary, "tags": dict(item.tags)}


def remote(url: str, key: str) -> dict[str, Any]:
    from keep.config import StoreConfig
    from keep.remote import RemoteKeeper

    kp = RemoteKeeper(url, key, StoreConfig(path=Path("/tmp")), project="driver")
    out: dict[str, Any] = {}
    out["put"] = _item(kp.put(content="OAuth2 uses PKCE for public clients", id="auth",
                              tags={"topic": "auth"}))  # fmt: skip
    kp.put(content="Use PKCE with S256 for every OAuth2 client", id="auth")
    kp.put(content="Refresh tokens rotate on every use", id="tokens", tags={"topic": "auth"})
    out["get"] = _item(kp.get("auth"))
    out["get_missing"] = _item(kp.get("no-such-note"))
    out["find_query"] = [i.id for i in kp.find("PKCE S256")]
    out["find_tags"] = sorted(i.id for i in kp.find(tags={"topic": "auth"}))
    out["find_since"] = sorted(i.id for i in kp.find(since="P1D"))
    # "tokens" and "rotation" were put and embedded by the test beforehand
    out["find_similar"] = [i.id for i in kp.find(similar_to="tokens")]
    out["tag"] = _item(kp.tag("auth", {"status": "open"}))
    out["now"] = _item(kp.set_now("working on auth"))
    out["get_now"] = _item(kp.get_now())
    out["move"] = _item(kp.move("auth-archive", source_id="now"))
    context = kp.get_context("auth")
    out["context"] = (
        None
        if context is None
        else {
            "item": context.item.id,
            "prev": [p.offset for p in context.prev],
        }
    )
    out["count"] = kp.count()
    out["export_header_and_ids"] = [d.get("id") or "header" for d in kp.export_iter()]
    bundle = kp.export_bundle("auth")
    out["bundle"] = None if bundle is None else sorted(bundle)
    changes = kp.export_changes(cursor="0", limit=100)
    out["changes"] = None if changes is None else len(changes.get("events", []))
    out["delete"] = kp.delete("tokens")
    out["after_delete"] = _item(kp.get("tokens"))
    return out


def verify(url: str, key: str) -> dict[str, Any]:
    from keep.config import RemoteConfig
    from keep.setup_wizard import _verify_remote

    ok, message = _verify_remote(RemoteConfig(api_url=url, api_key=key, project="verify"))
    bad_ok, bad_message = _verify_remote(
        RemoteConfig(api_url=url, api_key="km_aaaaaaaa_" + "x" * 30, project="verify")
    )
    return {"ok": ok, "message": message, "bad_ok": bad_ok, "bad_message": bad_message}


def sync(url: str, key: str) -> dict[str, Any]:
    """keep's markdown mirror following keepmem's change feed, with keep's own
    code: a baseline export, the cursor `keep data export --sync` registers
    (``export_changes(limit=0)``), then the daemon's polls
    (``poll_markdown_mirrors``), which page the feed from that cursor and
    rewrite the notes it names; and a cursor that names no change (the
    project was erased and made again), which the feed answers
    ``compacted``: keep rebuilds the mirror and follows from the head."""
    import tempfile
    import time
    from types import SimpleNamespace

    from keep.config import StoreConfig
    from keep.markdown_mirrors import (
        MarkdownMirrorEntry,
        _load_map,
        load_markdown_mirrors,
        poll_markdown_mirrors,
        run_markdown_export_once,
        save_markdown_mirrors,
    )
    from keep.remote import RemoteKeeper

    # The default project: keep's mirror reads only events of its collection
    # "default", and keepmem names each event's collection after its project.
    kp = RemoteKeeper(url, key, StoreConfig(path=Path("/tmp")))
    work = Path(tempfile.mkdtemp(prefix="keep-sync-"))
    daemon = SimpleNamespace(config=SimpleNamespace(config_dir=str(work / "config")))
    root = work / "mirror"
    out: dict[str, Any] = {}

    def mirrored() -> list[str]:
        return sorted(_load_map(root).values())

    def poll() -> MarkdownMirrorEntry:
        time.sleep(1.1)  # past the mirror's interval (PT1S) since the changes
        for _ in range(2):  # one pass notes what is pending, the next writes it
            poll_markdown_mirrors(daemon, source_keeper=kp)  # type: ignore[arg-type]
        return load_markdown_mirrors(daemon)[0]  # type: ignore[arg-type]

    kp.put(content="the first note of the mirror", id="s-1")
    run_markdown_export_once(kp, root, include_system=False, allow_existing=True)
    registered = str(kp.export_changes(limit=0).get("cursor") or "")
    out["registered_cursor"] = registered
    save_markdown_mirrors(daemon, [MarkdownMirrorEntry(  # type: ignore[arg-type]
        root=str(root), interval="PT1S", source_cursor=registered)])  # fmt: skip
    out["baseline"] = mirrored()
    for n in range(2, 6):
        kp.put(content=f"note {n}, written after the baseline", id=f"s-{n}")
    entry = poll()
    head = kp.export_changes(limit=0)
    out["followed"] = {"mirrored": mirrored(), "error": entry.last_error,
                       "cursor": entry.source_cursor, "head": head.get("head_cursor")}  # fmt: skip
    # A cursor naming no change of the project: keep's client rebuilds.
    entry.source_cursor = "0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f"
    save_markdown_mirrors(daemon, [entry])  # type: ignore[arg-type]
    kp.put(content="written while the mirror's cursor was lost", id="s-6")
    entry = poll()
    head = kp.export_changes(limit=0)
    out["rebuilt"] = {"mirrored": mirrored(), "error": entry.last_error,
                      "cursor": entry.source_cursor, "head": head.get("head_cursor")}  # fmt: skip
    return out


async def _mcp(url: str, key: str) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    keep = str(Path(sys.executable).parent / "keep")
    env = {**os.environ, "KEEPNOTES_API_URL": url, "KEEPNOTES_API_KEY": key,
           "KEEPNOTES_PROJECT": "mcp"}  # fmt: skip
    params = StdioServerParameters(command=keep, args=["mcp"], env=env)
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)

        async def call(tool: str, arguments: dict[str, Any]) -> Any:
            result = await session.call_tool(tool, arguments)
            text = "".join(getattr(c, "text", "") for c in result.content)
            failed = getattr(result, "is_error", None)
            if failed is None:
                failed = getattr(result, "isError", False)
            return {"error": bool(failed), "text": text}

        out["put"] = await call(
            "keep_flow",
            {"state": "put", "params": {"content": "MCP note about PKCE", "id": "mcp-note"}},
        )
        out["resolve"] = await call(
            "keep_flow", {"state": "query-resolve", "params": {"query": "PKCE"}}
        )
        out["get"] = await call("keep_flow", {"state": "get", "params": {"item_id": "mcp-note"}})
        out["prompt"] = await call("keep_prompt", {"name": "reflect", "text": "PKCE"})
        prompts = await session.list_prompts()
        out["native_prompts"] = sorted(p.name for p in prompts.prompts)
        native = await session.get_prompt("reflect", {"text": "PKCE"})
        out["native_prompt_text"] = "".join(getattr(m.content, "text", "") for m in native.messages)
        resource = await session.read_resource("keep://mcp-note")
        out["resource"] = "".join(getattr(c, "text", "") for c in resource.contents)
        now = await session.read_resource("keep://now")
        out["now"] = "".join(getattr(c, "text", "") for c in now.contents)
    return out


def main() -> None:
    mode, url, key = sys.argv[1:4]
    runners = {
        "remote": remote,
        "verify": verify,
        "sync": sync,
        "mcp": lambda u, k: asyncio.run(_mcp(u, k)),
    }
    print(json.dumps(runners[mode](url, key), default=str))  # noqa: T201 - the output


if __name__ == "__main__":
    main()
