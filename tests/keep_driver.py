"""Drives the real keep client (keep-skill 0.163.4) against a keepmem server.

Runs in keep's own virtualenv (tests/test_keep_client.py starts it), never in
keepmem's, and prints one JSON object: what each call returned.

    <keep-venv>/bin/python tests/keep_driver.py remote|verify|mcp URL KEY
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
    runners = {"remote": remote, "verify": verify, "mcp": lambda u, k: asyncio.run(_mcp(u, k))}
    print(json.dumps(runners[mode](url, key), default=str))  # noqa: T201 - the output


if __name__ == "__main__":
    main()
