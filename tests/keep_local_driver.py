"""Drives keep-skill's real Keeper in local mode with ``[store] backend =
"keepmem"`` (keepmem's storage backend), in the virtualenv where both are
installed (``make keep-local``). Prints one JSON object, the last line.

    <keep-local-venv>/bin/python tests/keep_local_driver.py session|get|open HOME PROJECT [ID]

The database, key and server secret come from KEEPMEM_DATABASE_URL,
KEEPMEM_API_KEY and KEEPMEM_SECRET_KEY, as a user would set them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def keeper(home: Path, project: str) -> Any:
    from keep.api import Keeper
    from keep.config import load_or_create_config

    home.mkdir(parents=True, exist_ok=True)
    os.environ["KEEP_CONFIG"] = str(home)
    config = load_or_create_config(home)
    config.backend = "keepmem"
    config.backend_params = {"project": project}
    config.embedding = None  # keepmem's workers embed (keep's queue is keepmem's)
    config.path = home / "store"
    return Keeper(config=config)


def session(kp: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["put"] = kp.put("OAuth2 uses PKCE for public clients", id="auth", tags={"topic": "auth"}).id
    kp.put("Use PKCE with S256 for every OAuth2 client", id="auth")
    kp.put("Refresh tokens rotate on every use", id="tokens", tags={"topic": "auth"})
    got = kp.get("auth")
    out["get"] = {"summary": got.summary, "topic": got.tags.get("topic")}
    out["get_missing"] = kp.get("no-such-note") is None
    out["versions"] = [v.summary for v in kp.list_versions("auth")]
    out["version_1"] = kp.get_version("auth", 1).summary
    out["find"] = [i.id for i in kp.find("PKCE S256")]
    out["find_tags"] = sorted(i.id for i in kp.find(tags={"topic": "auth"}))
    out["find_since"] = sorted(i.id for i in kp.find(since="P1D"))
    out["tag"] = kp.tag("auth", {"status": "open"}).tags.get("status")
    out["list"] = sorted(i.id for i in kp.list_items(limit=10))
    out["now"] = kp.set_now("working on auth").summary
    out["get_now"] = kp.get_now().summary
    out["move"] = kp.move("auth-log", source_id="now").id
    out["moved"] = kp.get("auth-log").summary
    kp.put("a draft", id="draft")
    kp.put("a second draft", id="draft")
    out["revert"] = kp.revert("draft").summary
    out["count"] = kp.count()
    exported = list(kp.export_iter(include_system=False))
    out["export"] = sorted(d["id"] for d in exported[1:])
    out["import"] = kp.import_data(
        {
            "format": "keep-export",
            "version": 1,
            "documents": [
                {
                    "id": "imported",
                    "summary": "an imported note",
                    "tags": {"origin": "backup"},
                    "created_at": "2024-01-01T00:00:00",
                    "updated_at": "2024-01-01T00:00:00",
                    "versions": [
                        {"version": 1, "summary": "its older text", "tags": {},
                         "created_at": "2023-06-01T00:00:00"},
                    ],
                    "parts": [],
                }
            ],
        },
        mode="merge",
    )  # fmt: skip
    out["imported_versions"] = [v.summary for v in kp.list_versions("imported")]
    out["delete"] = kp.delete("tokens")
    out["deleted"] = kp.get("tokens") is None
    return out


def main() -> None:
    mode, home, project = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if mode == "open":  # only open the store: configuration errors
        try:
            keeper(home, project).close()
            print(json.dumps({"opened": True}))  # noqa: T201 - the output
        except Exception as exc:  # noqa: BLE001 - the error a user would see
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))  # noqa: T201
        return
    kp = keeper(home, project)
    try:
        if mode == "session":
            out = session(kp)
        else:  # get
            item = kp.get(sys.argv[4])
            out = {
                "item": None if item is None else {"summary": item.summary, "tags": dict(item.tags)}
            }
    finally:
        kp.close()
    print(json.dumps(out))  # noqa: T201 - the output


if __name__ == "__main__":
    main()
