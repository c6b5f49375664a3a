"""Drives keep-skill's real Keeper in local mode with ``[store] backend =
"keepmem"`` (keepmem's storage backend), in the virtualenv where both are
installed (``make keep-local``). Prints one JSON object, the last line.

    <venv>/bin/python tests/keep_local_driver.py MODE HOME PROJECT [ID]

MODE: session, contract, readonly, get or open.

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
    from keep.config import ProviderConfig, load_or_create_config

    home.mkdir(parents=True, exist_ok=True)
    os.environ["KEEP_CONFIG"] = str(home)
    config = load_or_create_config(home)
    config.backend = "keepmem"
    config.backend_params = {"project": project}
    # keep's own embeddings (its query vectors, analyzed parts) from an
    # OpenAI-compatible server when the test gives one; keepmem's workers embed
    # the notes themselves either way
    embed_url = os.environ.get("KEEP_TEST_EMBEDDINGS_URL")
    config.embedding = (
        ProviderConfig(
            "openai",
            {"model": "text-embedding-3-small", "base_url": embed_url, "api_key": "local-test"},
        )
        if embed_url
        else None
    )
    config.path = home / "store"
    return Keeper(config=config)


class Sentences:
    """keep's AnalyzerProvider interface, one part per sentence (no model)."""

    def analyze(self, chunks: Any, guide_context: str = "", **options: Any) -> list[dict[str, Any]]:
        text = " ".join(c.content for c in chunks)
        found = [s.strip() for s in text.split(".") if s.strip()]
        return [{"summary": s + ".", "tags": {"n": str(i)}} for i, s in enumerate(found, 1)]


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
    text = " ".join(
        f"Entry {n} of the harbour log records the tide, the wind and the boats that came in."
        for n in range(1, 9)
    )  # long enough for keep to analyze (min_analyze_length)
    kp.put(text, id="harbour")
    parts = kp.analyze("harbour", analyzer=Sentences(), force=True)
    out["analyze"] = [p.summary for p in parts]
    out["part_2"] = kp.get_part("harbour", 2).summary
    out["keep_collection"] = kp._resolve_chroma_collection()
    out["part_vectors"] = sum(
        1 for i in kp._store.list_ids(out["keep_collection"]) if i.startswith("harbour@p")
    )
    out["delete"] = kp.delete("tokens")
    out["deleted"] = kp.get("tokens") is None
    return out


def contract(home: Path, project: str) -> dict[str, Any]:
    """The stores on their own, as keep's Keeper uses them (``create_stores``)."""
    from keep.backend import create_stores
    from keep.config import StoreConfig

    bundle = create_stores(
        StoreConfig(path=home, backend="keepmem", backend_params={"project": project})
    )
    docs, vecs, c = bundle.doc_store, bundle.vector_store, "default"
    out: dict[str, Any] = {"is_local": bundle.is_local}
    rec, changed = docs.upsert(c, "doc:1", "Version 1", {"tag": "a"}, content_hash="h1")
    out["new"] = [rec.id, rec.summary, rec.tags, changed]
    rec, changed = docs.upsert(c, "doc:1", "Version 2", {"tag": "b"}, content_hash="h2")
    out["changed"] = [rec.summary, changed, rec.created_at <= rec.updated_at]
    out["versions"] = [
        (v.version, v.summary, v.tags.get("tag")) for v in docs.list_versions(c, "doc:1")
    ]
    out["dedup"] = docs.upsert(c, "doc:2", "S", {"k": ["v1", "v1", "v2"], "one": ["x", "x"]})[
        0
    ].tags
    out["update_summary"] = [
        docs.update_summary(c, "doc:2", "New"),
        docs.update_summary(c, "nope", "x"),
    ]
    out["update_tags"] = [
        docs.update_tags(c, "doc:2", {"new": "t"}),
        docs.update_tags(c, "nope", {}),
    ]
    out["after_updates"] = [docs.get(c, "doc:2").summary, docs.get(c, "doc:2").tags]
    out["get_many"] = sorted(docs.get_many(c, ["doc:1", "doc:2", "missing"]))
    out["by_hash"] = getattr(docs.find_by_content_hash(c, "h2"), "id", None)
    out["glob"] = [r.id for r in docs.query_by_id_glob(c, "doc:?")]
    out["prefix"] = [r.id for r in docs.query_by_id_prefix(c, "doc:")]
    out["tag_value"] = [r.id for r in docs.query_by_tag_value(c, "new", "t")]
    out["tag_key"] = [r.id for r in docs.query_by_tag_key(c, "tag")]
    out["tag_keys"] = docs.list_distinct_tag_keys(c)
    out["tag_values"] = docs.list_distinct_tag_values(c, "tag")
    out["restore"] = docs.restore_latest_version(c, "doc:1").summary
    out["restore_none"] = docs.restore_latest_version(c, "doc:2")
    out["fts"] = [r[0] for r in docs.query_fts(c, "Version")]
    part = sys.modules["keep.document_store"].PartInfo
    made = [part(1, "Opening about tides", {"kind": "intro"}, ""), part(2, "Harbour dues", {}, "")]
    out["parts"] = docs.upsert_parts(c, "doc:1", made)
    out["part_tags"] = docs.update_part_tags(c, "doc:1", 2, {"kind": ["fees", "fees"]})
    out["part_list"] = [(p.part_num, p.summary, p.tags) for p in docs.list_parts(c, "doc:1")]
    out["part_fts"] = [r[0] for r in docs.query_fts(c, "harbour dues")]
    # vectors: keep's own, under its own model identity
    coll = "openai_test-model_3"
    vecs.upsert(coll, "doc:1", [1.0, 0.0, 0.0], "", {})
    vecs.upsert(coll, "doc:2", [0.0, 1.0, 0.0], "", {})
    vecs.upsert(coll, "ghost", [0.0, 0.0, 1.0], "", {})  # no such note: not stored
    near = vecs.query_embedding(coll, [0.9, 0.1, 0.0], limit=5)
    out["near"] = [(r.id, round(r.distance, 3)) for r in near]
    out["embedding"] = vecs.get_embedding(coll, "doc:2")
    out["vector_ids"] = vecs.list_ids(coll)
    out["missing"] = sorted(vecs.find_missing_ids(coll, ["doc:1", "doc:3"]))
    out["other_model"] = vecs.list_ids("another_model_3")
    out["vec_delete"] = [vecs.delete(coll, "doc:2"), vecs.exists(coll, "doc:2")]
    out["delete"] = [docs.delete(c, "doc:1"), docs.delete(c, "doc:1"), docs.exists(c, "doc:1")]
    docs.close()
    vecs.close()
    try:
        docs.get(c, "doc:2")
        out["after_close"] = "answered"
    except RuntimeError as exc:
        out["after_close"] = str(exc)
    return out


def read_only(home: Path, project: str) -> dict[str, Any]:
    from keep.backend import create_stores
    from keep.config import StoreConfig

    bundle = create_stores(
        StoreConfig(path=home, backend="keepmem", backend_params={"project": project})
    )
    out: dict[str, Any] = {
        "get": getattr(bundle.doc_store.get("default", "shared"), "summary", None)
    }
    for name, write in (
        ("upsert", lambda: bundle.doc_store.upsert("default", "mine", "text", {})),
        ("vector", lambda: bundle.vector_store.upsert("k_3", "shared", [1.0, 0, 0], "", {})),
        ("delete", lambda: bundle.doc_store.delete("default", "shared")),
    ):
        try:
            write()
            out[name] = "written"
        except PermissionError as exc:
            out[name] = str(exc)
    bundle.doc_store.close()
    bundle.vector_store.close()
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
    if mode in ("contract", "readonly"):
        runner = contract if mode == "contract" else read_only
        print(json.dumps(runner(home, project)))  # noqa: T201 - the output
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
