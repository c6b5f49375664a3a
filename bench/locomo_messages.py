"""LoCoMo through the messages route (issue 33), against turns as notes in
the same run, end to end over HTTP on the embedded stack.

    .venv/bin/python -m bench.locomo_messages [--roles both|user|alternate] [--out FILE]

For each conversation: every session's turns as one batch to POST
/v1/threads/<conversation>/messages (name = the speaker, time = the session
date, tags {"session": <key>}, infer true: the worker's offline rules form
memories from them), in session order; and in the same run the same turns
as notes, as bench/locomo.py puts them (id = dia_id, content
"Speaker: text", tags speaker and session, created_at the session date).
One project per conversation and variant:

* ``notes-<conv>``: turns as notes (the reference);
* ``user-<conv>``: messages, role "user" for both speakers;
* ``alt-<conv>``: messages, speaker_a "user" and speaker_b "assistant".

Once the worker is idle (every job: embedding, graph, extraction), every
question with evidence is a find (POST /v1/search, limit 10) in each
project; message note ids map back to dia_ids. A memory note in the results
counts as its source messages (its ``references`` tag) in one scoring
("memory = its sources") and as nothing in another ("memory = nothing":
it still takes its place in the top 10). A third find in the user-role
project, ``scope: "thread/*"``, returns messages only: what the messages
score with the memories filtered out of the results, so a gap splits into
memory notes crowding the top 10 and the messages' own ranking.

Target (issue 33): messages-route recall@10 within 0.01 of turns as notes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, running_stack
from bench.locomo import run as put_notes
from bench.locomo import score, tables, wait_idle
from bench.locomo_data import LOCOMO, _date, metrics
from bench.memory import code_state

TARGET = 0.01


def sessions(conv: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(key, ISO date, turns) of a conversation, in session order."""
    c = conv["conversation"]
    keys = [k for k, v in c.items() if k.startswith("session_") and isinstance(v, list)]
    keys.sort(key=lambda k: int(k.split("_")[1]))
    return [(k, _date(c[f"{k}_date_time"]), c[k]) for k in keys]


def set_metrics(found: list[set[str]], evidence: list[str]) -> tuple[float, float, float]:
    """locomo_data.metrics over ranks that each hold a set of dia_ids (a
    memory holds its sources): an evidence turn counts once, at its first rank."""
    wanted = set(evidence)
    seen: set[str] = set()
    dcg, r5 = 0.0, 0.0
    for i, ids in enumerate(found[:10]):
        new = (ids & wanted) - seen
        dcg += len(new) / math.log2(i + 2)
        seen |= new
        if i == 4:
            r5 = len(seen) / len(wanted)
    if len(found) < 5:
        r5 = len(seen) / len(wanted)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), 10)))
    return r5, len(seen) / len(wanted), dcg / ideal


async def put_messages(
    url: str, key: str, data: list[dict[str, Any]], variant: str
) -> tuple[dict[str, dict[str, str]], int]:
    """Every session as one batch; note id -> dia_id per project, and the
    number of batches that joined a waiting extraction job."""
    back: dict[str, dict[str, str]] = {}
    joined = 0
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:

        async def one(conv: dict[str, Any]) -> None:
            nonlocal joined
            name = conv["sample_id"].lower()
            project = f"{variant}-{name}"
            headers = {"Authorization": f"Bearer {key}", "X-Project": project}
            assistant = conv["conversation"]["speaker_b"] if variant == "alt" else None
            ids = back.setdefault(project, {})
            for session, when, turns in sessions(conv):
                msgs = [
                    {
                        "role": "assistant" if t["speaker"] == assistant else "user",
                        "content": t["text"],
                        "name": t["speaker"],
                        "time": when,
                        "tags": {"session": session},
                    }
                    for t in turns
                ]
                r = await http.post(
                    f"/v1/threads/{name}/messages",
                    json={"messages": msgs, "infer": True},
                    headers=headers,
                )
                r.raise_for_status()
                joined += r.json()["extraction"] == "joined"
                for note_id, t in zip(r.json()["messages"], turns, strict=True):
                    ids[note_id] = t["dia_id"]

        await asyncio.gather(*(one(conv) for conv in data))
    return back, joined


def _dia(note: dict[str, Any], back: dict[str, str]) -> set[str]:
    """The dia_ids a result stands for when a memory counts as its sources."""
    if note["id"] in back:
        return {back[note["id"]]}
    refs = (note.get("tags") or {}).get("references", [])
    refs = refs if isinstance(refs, list) else [refs]
    return {back[r] for r in refs if r in back}


async def evaluate(
    url: str,
    key: str,
    questions: list[tuple[str, dict[str, Any]]],
    variants: list[str],
    back: dict[str, dict[str, str]],
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Every question in every project, interleaved question by question;
    with what the memory notes in the results did: how many, where, of which
    attribute, how many only repeat messages already in the top 10, and the
    evidence turns the messages-only find had in its top 10 and the plain
    find lost (or gained)."""
    names = ["turns as notes"]
    for v in variants:
        names += [f"{v}: memory = its sources", f"{v}: memory = nothing"]
    if "user" in variants:
        names.append("user: messages only (scope thread/*)")
    rows: dict[str, list[tuple[str, int, tuple[float, float, float]]]] = {n: [] for n in names}
    took: dict[str, list[float]] = {n: [] for n in names}
    diag: dict[str, Any] = {
        v: {"memories_in_top10": 0, "redundant": 0, "attributes": {}, "rank_sum": 0}
        for v in variants
    }
    diag["lost"] = diag["gained"] = diag["questions_lost"] = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def find(project: str, q: str, **extra: Any) -> tuple[list[dict[str, Any]], float]:
            headers = {"Authorization": f"Bearer {key}", "X-Project": project}
            t = time.perf_counter()
            r = await http.post(
                "/v1/search", json={"query": q, "limit": 10, **extra}, headers=headers
            )
            r.raise_for_status()
            return r.json()["notes"], (time.perf_counter() - t) * 1000

        for conv, qa in questions:
            q, ev, cat = qa["question"], qa["evidence"], qa.get("category", 0)
            notes, ms = await find(f"notes-{conv}", q)
            rows["turns as notes"].append((conv, cat, metrics([n["id"] for n in notes], ev)))
            took["turns as notes"].append(ms)
            for v in variants:
                m = back[f"{v}-{conv}"]
                found, ms = await find(f"{v}-{conv}", q)
                sets = [_dia(n, m) for n in found]
                said = {m[n["id"]] for n in found if n["id"] in m}
                for rank, n in enumerate(found):
                    if n["id"] in m:
                        continue
                    d = diag[v]
                    d["memories_in_top10"] += 1
                    d["rank_sum"] += rank + 1
                    d["redundant"] += bool(sets[rank]) and sets[rank] <= said
                    attr = str((n.get("tags") or {}).get("attribute", "?"))
                    d["attributes"][attr] = d["attributes"].get(attr, 0) + 1
                plain = [m.get(n["id"], n["id"]) for n in found]
                if v == "user":
                    plain_user = plain
                for name, got in (
                    (f"{v}: memory = its sources", set_metrics(sets, ev)),
                    (f"{v}: memory = nothing", metrics(plain, ev)),
                ):
                    rows[name].append((conv, cat, got))
                    took[name].append(ms)
            if "user" in variants:
                m = back[f"user-{conv}"]
                found, ms = await find(f"user-{conv}", q, scope="thread/*")
                name = "user: messages only (scope thread/*)"
                alone = {m.get(n["id"], "") for n in found} & set(ev)
                mixed = set(plain_user) & set(ev)
                diag["lost"] += len(alone - mixed)
                diag["gained"] += len(mixed - alone)
                diag["questions_lost"] += bool(alone - mixed)
                rows[name].append(
                    (conv, cat, metrics([m.get(n["id"], n["id"]) for n in found], ev))
                )
                took[name].append(ms)
    results = {n: score(rows[n], took[n]) for n in names}
    for v in variants:
        d = diag[v]
        shown = d["memories_in_top10"] or 1
        d["per_question"] = round(d["memories_in_top10"] / len(questions), 2)
        d["mean_rank"] = round(d.pop("rank_sum") / shown, 1)
        d["redundant_share"] = round(d["redundant"] / shown, 3)
        d["attributes"] = dict(sorted(d["attributes"].items(), key=lambda kv: -kv[1]))
    return results, diag


def memory_counts(stack: Any) -> dict[str, int]:
    """Memory notes per variant (every project of it)."""
    out: dict[str, int] = {}
    rows = stack.sql(
        "SELECT split_part(p.slug, '-', 1), count(*) FROM notes n JOIN projects p "
        "ON p.tenant_id = n.tenant_id AND p.id = n.project_id "
        "WHERE n.id LIKE 'mem/%' GROUP BY 1 ORDER BY 1"
    )
    for row in rows.splitlines():
        variant, n = row.split("|")
        out[variant] = int(n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--roles", choices=("both", "user", "alternate"), default="both")
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "keepmem-bench-locomo-msg.json"
    )
    args = parser.parse_args()
    variants = {"both": ["user", "alt"], "user": ["user"], "alternate": ["alt"]}[args.roles]
    data = json.loads(LOCOMO.read_text())
    notes = [
        (
            f"notes-{conv['sample_id'].lower()}",
            {
                "id": t["dia_id"],
                "content": f"{t['speaker']}: {t['text']}",
                "tags": {"speaker": t["speaker"], "session": key},
                "created_at": when,
            },
        )
        for conv in data
        for key, when, turns in sessions(conv)
        for t in turns
    ]
    questions = [
        (conv["sample_id"].lower(), qa) for conv in data for qa in conv["qa"] if qa.get("evidence")
    ]
    began = time.monotonic()
    code = code_state()
    with running_stack() as stack:
        stack.extra_env = {"KEEPMEM_LOG_LEVEL": "WARNING"}
        url = stack.start_api()
        _, key = stack.tenant_key("locomo-messages")
        stack.start_worker()
        t = time.perf_counter()
        asyncio.run(put_notes(url, key, notes, questions))
        back: dict[str, dict[str, str]] = {}
        joined = 0
        for v in variants:
            got, j = asyncio.run(put_messages(url, key, data, v))
            back |= got
            joined += j
        sent_s = time.perf_counter() - t
        wait_idle(stack)
        ingest_s = time.perf_counter() - t
        stack.sql("ANALYZE")
        counts = memory_counts(stack)
        dead = stack.sql("SELECT count(*) FROM jobs WHERE status = 'dead'")
        asyncio.run(evaluate(url, key, questions[:50], variants, back))  # warm-up
        results, diag = asyncio.run(evaluate(url, key, questions, variants, back))
    ref = results["turns as notes"]["recall@10"]
    record: dict[str, Any] = {
        "machine": machine(),
        "code": code,
        "turns": len(notes),
        "questions": len(questions),
        "sessions_sent": sum(len(sessions(c)) for c in data) * len(variants),
        "batches_joined": joined,
        "send_s": round(sent_s, 1),
        "ingest_until_idle_s": round(ingest_s, 1),
        "memory_notes": counts,
        "memory_notes_in_results": diag,
        "dead_jobs": int(dead),
        "gap_recall@10": {n: round(m["recall@10"] - ref, 4) for n, m in results.items()},
        "results": results,
        "wall_s": round(time.monotonic() - began, 1),
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"\n## LoCoMo through the messages route ({stamp})\n")
    print(
        f"`python -m bench.locomo_messages --roles {args.roles}` on {record['machine']}; "
        f"{len(notes)} turns, {len(questions)} questions; memory notes {counts}; "
        f"wall {record['wall_s']} s; code {record['code']}; JSON: {args.out}\n"
    )
    print(tables(results))
    print(f"\nmemory notes in the results: {json.dumps(diag)}")
    print("\nrecall@10 against turns as notes (target: within -0.01):")
    for name, gap in record["gap_recall@10"].items():
        if name != "turns as notes":
            mark = "met" if gap >= -TARGET else "MISSED"
            print(f"  {name}: {gap:+.4f} ({mark})")
    if record["dead_jobs"]:
        print(f"{record['dead_jobs']} dead job(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
