"""Every API call, described once (``Call``); ``Keepmem`` and
``AsyncKeepmem`` send them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from keepmem_client import _models as m
from keepmem_client._base import Call, clean, note_path

Tags = Mapping[str, str | Sequence[str]]

FIND_FIELDS = (
    "query", "similar_to", "tags", "since", "until", "scope", "limit", "include_self",
    "include_hidden", "include_parts", "include_versions", "bias", "stages",
    "half_life_days", "deep", "deep_follow_depth", "include_superseded", "as_of",
    "per_document",
)  # fmt: skip


def put(
    content: str | None = None,
    *,
    id: str | None = None,
    uri: str | None = None,
    summary: str | None = None,
    tags: Tags | None = None,
    created_at: str | None = None,
    force: bool | None = None,
    analyze: bool | None = None,
) -> Call[m.Note]:
    body = clean(
        {"content": content, "id": id, "uri": uri, "summary": summary, "tags": tags,
         "created_at": created_at, "force": force, "analyze": analyze}
    )  # fmt: skip
    return Call("POST", "/v1/notes", m.Note.model_validate, json=body)


def put_many(notes: Sequence[Mapping[str, Any]]) -> Call[m.BatchOut]:
    return Call("POST", "/v1/notes/batch", m.BatchOut.model_validate, json={"notes": list(notes)})


def upload(
    file: Any, *, filename: str, id: str | None = None, tags: Tags | None = None
) -> Call[m.Note]:
    import json

    data = clean({"id": id, "tags": json.dumps(dict(tags)) if tags else None})
    return Call(
        "POST", "/v1/upload", m.Note.model_validate, files={"file": (filename, file)}, data=data
    )


def get(note_id: str) -> Call[m.Note]:
    return Call("GET", note_path(note_id), m.Note.model_validate, idempotent=True)


def find(*, cite: bool = False, **params: Any) -> Call[m.SearchResult]:
    # cite only when asked: a server older than citations refuses a field it lacks.
    body = clean({k: params.get(k) for k in FIND_FIELDS}) | ({"cite": True} if cite else {})
    return Call("POST", "/v1/search", m.SearchResult.model_validate, json=body, idempotent=True)


def find_compact(token_budget: int | None = None, **params: Any) -> Call[m.CompactResult]:
    body = clean({k: params.get(k) for k in FIND_FIELDS}) | clean({"token_budget": token_budget})
    return Call(
        "POST", "/v1/search/compact", m.CompactResult.model_validate, json=body, idempotent=True
    )


def upload_path(
    path: os.PathLike[str], *, filename: str | None = None, id: str | None = None,
    tags: Tags | None = None,
) -> Call[m.Note]:  # fmt: skip
    """A file on this machine, read whole (the server bounds an upload's size)."""
    where = Path(path)
    return upload(where.read_bytes(), filename=filename or where.name, id=id, tags=tags)


def timeline(
    note_id: str, *, before: int = 5, after: int = 5, token_budget: int | None = None
) -> Call[dict[str, Any]]:
    params = clean({"before": before, "after": after, "token_budget": token_budget})
    return Call("GET", note_path(note_id, "/timeline"), dict, params=params, idempotent=True)


def detail(note_id: str, *, token_budget: int | None = None) -> Call[dict[str, Any]]:
    params = clean({"token_budget": token_budget})
    return Call("GET", note_path(note_id, "/detail"), dict, params=params, idempotent=True)


def list_page(
    *,
    prefix: str | None = None,
    tags: Mapping[str, str] | None = None,
    tag_keys: Sequence[str] | None = None,
    since: str | None = None,
    until: str | None = None,
    order_by: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
    include_hidden: bool | None = None,
) -> Call[m.NotePage]:
    params: dict[str, Any] = clean(
        {"prefix": prefix, "since": since, "until": until, "order_by": order_by, "limit": limit,
         "cursor": cursor, "include_hidden": include_hidden}
    )  # fmt: skip
    if tags:
        params["tag"] = [f"{k}={v}" for k, v in tags.items()]
    if tag_keys:
        params["tag_key"] = list(tag_keys)
    return Call("GET", "/v1/notes", m.NotePage.model_validate, params=params, idempotent=True)


def tag(
    note_id: str,
    set: Tags | None = None,
    *,
    remove: Sequence[str] | None = None,
    remove_values: Tags | None = None,
) -> Call[m.Note]:
    body = clean({"set": set, "remove": remove, "remove_values": remove_values})
    return Call("PATCH", note_path(note_id, "/tags"), m.Note.model_validate, json=body)


def delete(note_id: str, *, delete_versions: bool = True) -> Call[m.Deleted]:
    params = {"delete_versions": "true" if delete_versions else "false"}
    return Call("DELETE", note_path(note_id), m.Deleted.model_validate, params=params)


def move(
    name: str, *, source: str = "now", tags: Tags | None = None, only_current: bool = False
) -> Call[m.Note]:
    body = clean({"name": name, "source": source, "tags": tags, "only_current": only_current})
    return Call("POST", "/v1/move", m.Note.model_validate, json=body)


def versions(note_id: str, *, limit: int = 10, offset: int = 0) -> Call[m.VersionList]:
    params = {"limit": limit, "offset": offset}
    return Call(
        "GET", note_path(note_id, "/versions"), m.VersionList.model_validate, params=params,
        idempotent=True,
    )  # fmt: skip


def parts(note_id: str) -> Call[list[m.Note]]:
    def read(body: Any) -> list[m.Note]:
        return [m.Note.model_validate(p) for p in body["parts"]]

    return Call("GET", note_path(note_id, "/parts"), read, idempotent=True)


def jobs(
    *, status: str | None = None, kind: str | None = None, note_id: str | None = None,
    limit: int = 50, before: str | None = None,
) -> Call[m.JobPage]:  # fmt: skip
    params = clean({"status": status, "kind": kind, "note_id": note_id, "limit": limit,
                    "before": before})  # fmt: skip
    return Call("GET", "/v1/jobs", m.JobPage.model_validate, params=params, idempotent=True)


def entities(*, name: str | None = None, kind: str | None = None, limit: int = 50) -> Call[Any]:
    params = clean({"name": name, "kind": kind, "limit": limit})
    return Call("GET", "/v1/entities", lambda b: b["entities"], params=params, idempotent=True)


def walk(
    *, note: str | None = None, entity: str | None = None, depth: int = 2, limit: int = 200
) -> Call[dict[str, Any]]:
    params = clean({"note": note, "entity": entity, "depth": depth, "limit": limit})
    return Call("GET", "/v1/graph/walk", dict, params=params, idempotent=True)


def graph_export(*, format: str = "graphml", table: str | None = None) -> Call[str]:
    # GraphML or one CSV table: the client reads the answer as text.
    params = clean({"format": format, "table": table})
    return Call("GET", "/v1/graph/export", str, params=params, idempotent=True)


def graph_stats() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/graph/stats", dict, idempotent=True)


def import_(documents: Sequence[Mapping[str, Any]], *, mode: str = "merge") -> Call[m.ImportResult]:
    body = {"format": "keep-export", "version": 3, "mode": mode, "documents": list(documents)}
    return Call("POST", "/v1/import", m.ImportResult.model_validate, json=body)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/health", dict, idempotent=True)


def flow(state: str, params: Mapping[str, Any] | None = None, **extra: Any) -> Call[dict[str, Any]]:
    """keep's flow endpoint (``POST /v1/flow``): a named state, its params."""
    body = {"state": state, "params": dict(params or {}), **clean(extra)}
    return Call("POST", "/v1/flow", dict, json=body)


# -- coding-agent sessions and collections ---------------------------------------------


def _session_path(session_id: str, suffix: str = "") -> str:
    return f"/v1/sessions/{quote(session_id, safe='')}{suffix}"


def _collection_path(name: str, suffix: str = "") -> str:
    return f"/v1/collections/{quote(name, safe='')}{suffix}"


def session_events(events: Sequence[Mapping[str, Any]]) -> Call[m.IntakeResult]:
    # Not idempotent: a repeated batch would be recorded twice.
    body = {"events": [dict(e) for e in events]}
    return Call("POST", "/v1/sessions/events", m.IntakeResult.model_validate, json=body)


def sessions(*, limit: int | None = None, cwd: str | None = None) -> Call[list[m.Session]]:
    def read(body: Any) -> list[m.Session]:
        return [m.Session.model_validate(s) for s in body["sessions"]]

    params = clean({"limit": limit, "cwd": cwd})
    return Call("GET", "/v1/sessions", read, params=params, idempotent=True)


def session(session_id: str) -> Call[m.Session]:
    return Call("GET", _session_path(session_id), m.Session.model_validate, idempotent=True)


def session_timeline(
    session_id: str, *, kind: str | None = None, limit: int | None = None,
    cursor: str | None = None,
) -> Call[m.SessionTimeline]:  # fmt: skip
    params = clean({"kind": kind, "limit": limit, "cursor": cursor})
    return Call(
        "GET", _session_path(session_id, "/timeline"), m.SessionTimeline.model_validate,
        params=params, idempotent=True,
    )  # fmt: skip


def session_checkpoints(session_id: str) -> Call[list[m.Checkpoint]]:
    def read(body: Any) -> list[m.Checkpoint]:
        return [m.Checkpoint.model_validate(c) for c in body["checkpoints"]]

    return Call("GET", _session_path(session_id, "/checkpoints"), read, idempotent=True)


def session_patterns(
    *, kind: str | Sequence[str] | None = None, limit: int | None = None
) -> Call[list[m.Pattern]]:
    def read(body: Any) -> list[m.Pattern]:
        return [m.Pattern.model_validate(p) for p in body["patterns"]]

    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    params = clean({"kind": kinds or None, "limit": limit})
    return Call("GET", "/v1/sessions/patterns", read, params=params, idempotent=True)


def resume_context(
    *, cwd: str | None = None, session_id: str | None = None
) -> Call[m.ResumeContext]:
    params = clean({"cwd": cwd, "session_id": session_id})
    return Call(
        "GET", "/v1/sessions/resume", m.ResumeContext.model_validate, params=params,
        idempotent=True,
    )  # fmt: skip


def checkpoint(session_id: str, *, note: str | None = None) -> Call[m.Session]:
    return Call(
        "POST", _session_path(session_id, "/checkpoint"), m.Session.model_validate,
        json=clean({"note": note}),
    )  # fmt: skip


def set_session(
    session_id: str, *, capture: bool | None = None, inject: bool | None = None
) -> Call[m.Session]:
    body = clean({"capture": capture, "inject": inject})
    return Call("PATCH", _session_path(session_id), m.Session.model_validate, json=body)


def session_settings() -> Call[m.SessionSettings]:
    return Call("GET", "/v1/sessions/settings", m.SessionSettings.model_validate, idempotent=True)


def set_session_settings(
    *, capture: bool | None = None, inject: bool | None = None,
    excludes: Sequence[str] | None = None, resume_chars: int | None = None,
    llm_tokens_per_day: int | None = None,
) -> Call[m.SessionSettings]:  # fmt: skip
    body = clean(
        {"capture": capture, "inject": inject,
         "excludes": list(excludes) if excludes is not None else None,
         "resume_chars": resume_chars, "llm_tokens_per_day": llm_tokens_per_day}
    )  # fmt: skip
    return Call("PUT", "/v1/sessions/settings", m.SessionSettings.model_validate, json=body)


def settings() -> Call[m.ProjectSettings]:
    return Call("GET", "/v1/settings", m.ProjectSettings.model_validate, idempotent=True)


def update_settings(changes: Mapping[str, Any]) -> Call[m.ProjectSettings]:
    # Not cleaned: a setting given as None is sent as null (the server's default).
    return Call("PATCH", "/v1/settings", m.ProjectSettings.model_validate, json=dict(changes))


def collections() -> Call[list[m.Collection]]:
    def read(body: Any) -> list[m.Collection]:
        return [m.Collection.model_validate(c) for c in body["collections"]]

    return Call("GET", "/v1/collections", read, idempotent=True)


def save_collection(
    name: str, *, query: str | None = None, tags: Mapping[str, str] | None = None,
    since: str | None = None, limit: int | None = None, description: str | None = None,
) -> Call[m.Collection]:  # fmt: skip
    body = clean(
        {"query": query, "tags": dict(tags) if tags is not None else None, "since": since,
         "limit": limit, "description": description}
    )  # fmt: skip
    return Call("PUT", _collection_path(name), m.Collection.model_validate, json=body)


def collection(name: str) -> Call[m.CollectionRun]:
    return Call("GET", _collection_path(name), m.CollectionRun.model_validate, idempotent=True)


def export_collection(name: str, *, format: str | None = None) -> Call[str]:
    # The answer is Markdown, JSON or plain text: the client reads it as text.
    params = clean({"format": format})
    return Call("GET", _collection_path(name, "/export"), str, params=params, idempotent=True)


def delete_collection(name: str) -> Call[None]:
    return Call("DELETE", _collection_path(name), lambda _: None)


# -- threads of messages and the memories formed from them ---------------------------


def _thread_path(thread_id: str, suffix: str = "") -> str:
    return f"/v1/threads/{quote(thread_id, safe='')}{suffix}"


def _memory_path(memory_id: str) -> str:
    # Memory ids hold a "/" (mem/...): one path segment, as note ids are sent.
    return f"/v1/memories/{quote(memory_id, safe='')}"


def _memory_list(body: Any) -> list[m.Memory]:
    return [m.Memory.model_validate(x) for x in body["memories"]]


def add_messages(
    thread_id: str, messages: Sequence[Mapping[str, Any]], *, user_id: str | None = None,
    agent_id: str | None = None, infer: bool = True,
) -> Call[m.MessagesAdded]:  # fmt: skip
    # Not idempotent: a repeated batch would be stored (and read) twice.
    body = clean({"messages": [dict(x) for x in messages], "user_id": user_id,
                  "agent_id": agent_id, "infer": infer})  # fmt: skip
    return Call(
        "POST", _thread_path(thread_id, "/messages"), m.MessagesAdded.model_validate, json=body
    )


def threads(
    *, user_id: str | None = None, agent_id: str | None = None, limit: int | None = None,
    offset: int | None = None,
) -> Call[list[m.Thread]]:  # fmt: skip
    def read(body: Any) -> list[m.Thread]:
        return [m.Thread.model_validate(t) for t in body["threads"]]

    params = clean({"user_id": user_id, "agent_id": agent_id, "limit": limit, "offset": offset})
    return Call("GET", "/v1/threads", read, params=params, idempotent=True)


def thread(thread_id: str) -> Call[m.Thread]:
    return Call("GET", _thread_path(thread_id), m.Thread.model_validate, idempotent=True)


def delete_thread(thread_id: str, *, memories: bool = False) -> Call[m.ThreadDeleted]:
    params = {"memories": "true" if memories else "false"}
    return Call("DELETE", _thread_path(thread_id), m.ThreadDeleted.model_validate, params=params)


def thread_messages(
    thread_id: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[m.MessagePage]:
    params = clean({"limit": limit, "cursor": cursor})
    return Call(
        "GET", _thread_path(thread_id, "/messages"), m.MessagePage.model_validate,
        params=params, idempotent=True,
    )  # fmt: skip


def thread_memories(
    thread_id: str, *, as_of: str | None = None, include_superseded: bool | None = None,
    limit: int | None = None,
) -> Call[list[m.Memory]]:  # fmt: skip
    params = clean({"as_of": as_of, "include_superseded": include_superseded, "limit": limit})
    return Call(
        "GET", _thread_path(thread_id, "/memories"), _memory_list, params=params, idempotent=True
    )


def thread_context(
    thread_id: str, *, query: str | None = None, token_budget: int | None = None
) -> Call[m.ThreadContext]:
    params = clean({"query": query, "token_budget": token_budget})
    return Call(
        "GET", _thread_path(thread_id, "/context"), m.ThreadContext.model_validate,
        params=params, idempotent=True,
    )  # fmt: skip


def memories(
    *, user_id: str | None = None, agent_id: str | None = None, subject: str | None = None,
    kind: str | None = None, as_of: str | None = None, include_superseded: bool | None = None,
    limit: int | None = None, offset: int | None = None,
) -> Call[list[m.Memory]]:  # fmt: skip
    params = clean(
        {"user_id": user_id, "agent_id": agent_id, "subject": subject, "kind": kind,
         "as_of": as_of, "include_superseded": include_superseded, "limit": limit,
         "offset": offset}
    )  # fmt: skip
    return Call("GET", "/v1/memories", _memory_list, params=params, idempotent=True)


def memory(memory_id: str) -> Call[m.MemoryDetail]:
    return Call("GET", _memory_path(memory_id), m.MemoryDetail.model_validate, idempotent=True)


def remember(
    statement: str, *, subject: str | None = None, attribute: str | None = None,
    value: str | None = None, kind: str | None = None, single: bool | None = None,
    negated: bool | None = None, valid_at: str | None = None, user_id: str | None = None,
    agent_id: str | None = None, thread_id: str | None = None, tags: Tags | None = None,
) -> Call[m.Remembered]:  # fmt: skip
    body = clean(
        {"statement": statement, "subject": subject, "attribute": attribute, "value": value,
         "kind": kind, "single": single, "negated": negated, "valid_at": valid_at,
         "user_id": user_id, "agent_id": agent_id, "thread_id": thread_id,
         "tags": dict(tags) if tags is not None else None}
    )  # fmt: skip
    return Call("POST", "/v1/memories", m.Remembered.model_validate, json=body)


def memory_settings() -> Call[m.MemorySettings]:
    return Call("GET", "/v1/memories/settings", m.MemorySettings.model_validate, idempotent=True)


def set_memory_settings(llm_tokens_per_day: int | None) -> Call[m.MemorySettings]:
    # null is meaningful here (the server's budget again): sent as it is.
    body = {"llm_tokens_per_day": llm_tokens_per_day}
    return Call("PATCH", "/v1/memories/settings", m.MemorySettings.model_validate, json=body)


def memory_spend() -> Call[m.MemorySpend]:
    return Call("GET", "/v1/memories/spend", m.MemorySpend.model_validate, idempotent=True)
