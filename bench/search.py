"""Search benchmark on real text at 100k notes.

    .venv/bin/python -m bench.search [--notes 100000] [--queries 200]

Corpus: paragraphs of real English from the docstrings of the Python standard
library and the installed packages (~110k distinct paragraphs, 40-400 chars),
embedded once with the offline MiniLM model and cached outside the repository
(``~/.cache/keepmem-bench``, or ``KEEPMEM_BENCH_CACHE``). Held-out paragraphs
are the queries. Notes are bulk-loaded into the embedded Postgres (ingestion
is measured by bench/pipeline.py); then:

1. HNSW index build time and size;
2. recall@10 of the vector stage against exact search (same filters), for one
   big tenant and for 100 tenants sharing the table with a tag filter;
3. find over HTTP (hybrid, query embeddings cached so the time is the
   service's own), p50/p95/p99 at concurrency 1 and 8, with the server-side
   time from the ``Server-Timing`` header; query-embedding time on its own.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import text

from app import tenancy
from app.db import Database
from app.providers.embedding.minilm import MiniLMEncoder
from app.search import repository as search_base
from app.search.fulltext import repository as search_repo
from app.settings import Settings
from app.tenancy import scope_for_job
from bench.common import machine, pct, running_stack

CACHE = Path(os.environ.get("KEEPMEM_BENCH_CACHE", Path.home() / ".cache" / "keepmem-bench"))


def corpus() -> list[str]:
    path = CACHE / "docstrings.json"
    if path.exists():
        # Postgres text cannot hold NUL; a few docstrings spell one out.
        return [p.replace("\x00", " ") for p in json.loads(path.read_text())]
    import sys
    import sysconfig

    roots = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]}
    seen: set[str] = set()
    out: list[str] = []
    for root in sorted(roots):
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                try:
                    tree = ast.parse(Path(dirpath, name).read_text(errors="ignore"))
                except (SyntaxError, ValueError):
                    continue
                for node in ast.walk(tree):
                    if not isinstance(
                        node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module
                    ):
                        continue
                    doc = ast.get_docstring(node)
                    for para in re.split(r"\n\s*\n", doc or ""):
                        p = " ".join(para.split())
                        if (
                            40 <= len(p) <= 400
                            and p not in seen
                            and not p.startswith((">>>", ":", ".."))
                            and sum(c.isalpha() for c in p) > 0.7 * len(p)
                        ):
                            seen.add(p)
                            out.append(p.replace("\x00", " "))  # Postgres text holds no NUL
    print(f"corpus: {len(out)} paragraphs", file=sys.stderr)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def embeddings(texts: list[str]) -> np.ndarray:
    """MiniLM vectors of ``texts``, cached; a longer run reuses a shorter one's prefix."""
    path = CACHE / f"minilm-{len(texts)}.npy"
    if path.exists():
        return np.load(path)
    for cached in CACHE.glob("minilm-*.npy"):
        if int(cached.stem.split("-")[1]) > len(texts):
            return np.load(cached)[: len(texts)]
    done = np.zeros((0, 384), dtype=np.float32)
    for cached in sorted(CACHE.glob("minilm-*.npy"), key=lambda p: int(p.stem.split("-")[1])):
        if int(cached.stem.split("-")[1]) <= len(texts):
            done = np.load(cached)
    encoder = MiniLMEncoder(threads=2, batch_size=16)
    t = time.perf_counter()
    parts = [done]
    for i in range(len(done), len(texts), 4096):
        parts.append(encoder.encode(texts[i : min(i + 4096, len(texts))]))
        print(f"embedded {i + len(parts[-1])}/{len(texts)}", flush=True)
    out = np.vstack(parts).astype(np.float32)
    print(f"embedded {len(texts) - len(done)} in {time.perf_counter() - t:.0f} s")
    np.save(path, out)
    return out


CANDIDATES = 200  # find's vector stage asks for max(limit * 10, 200)
WARM_PASSES = 6  # each question asked this often first (every API process caches its own)
MODEL = "local:all-MiniLM-L6-v2"


def synthetic(
    texts: list[str], vecs: np.ndarray, count: int, seed: int = 7
) -> tuple[list[str], np.ndarray]:
    """SYNTHETIC top-up for the 1M run, labelled as such in BENCHMARKS.md: each
    note reuses a real paragraph's text and takes that paragraph's real vector
    plus Gaussian noise (cosine to it ~0.9), normalised."""
    rng = np.random.default_rng(seed)
    idx = np.arange(count) % len(texts)
    noise = rng.normal(0.0, 0.025, size=(count, vecs.shape[1])).astype(np.float32)
    out = vecs[idx] + noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return [texts[i] for i in idx], out


async def bulk_load(
    owner: Database,
    tenant: uuid.UUID,
    project: uuid.UUID,
    texts: list[str],
    vecs: np.ndarray,
    *,
    first_id: int = 0,
    tags: bool = False,
    chunk: int = 50_000,
) -> None:
    """COPY notes and their vectors into one project (ingestion through the API
    is measured by bench/pipeline.py)."""
    import datetime as dt

    from pgvector.asyncpg import register_vector

    stamp = dt.datetime.now(dt.UTC)
    async with owner.engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        await register_vector(raw)
        for lo in range(0, len(texts), chunk):
            note_rows = []
            emb_rows = []
            for i in range(lo, min(lo + chunk, len(texts))):
                nid = f"n{first_id + i}"
                topic = f"t{i % 10}"
                note_tags = {"topic": topic} if tags else {}
                terms = ["topic", f"topic={topic}"] if tags else []
                note_rows.append(
                    (
                        tenant,
                        project,
                        nid,
                        texts[i],
                        json.dumps(note_tags),
                        terms,
                        stamp,
                        stamp,
                        stamp,
                    )
                )
                emb_rows.append(
                    (tenant, project, nid, "note", 0, "local:all-MiniLM-L6-v2", 384, vecs[i])
                )
            await raw.copy_records_to_table(
                "notes",
                records=note_rows,
                columns=[
                    "tenant_id",
                    "project_id",
                    "id",
                    "summary",
                    "tags",
                    "tag_index",
                    "created_at",
                    "updated_at",
                    "accessed_at",
                ],
            )
            await raw.copy_records_to_table(
                "embeddings",
                records=emb_rows,
                columns=[
                    "tenant_id",
                    "project_id",
                    "note_id",
                    "kind",
                    "ref",
                    "model",
                    "dim",
                    "embedding",
                ],
            )
        await conn.commit()


def exact_top10(queries: np.ndarray, ids: list[str], matrix: np.ndarray) -> list[set[str]]:
    """The true 10 nearest (cosine) of each query among ``matrix``'s rows, in
    numpy: a reference that shares no code or plan with the database. (At 1M
    rows an "exact" SQL query with the notes join, index scans off, returned
    a wrong top 10 on this machine; not diagnosed, so SQL is not the judge.)"""
    out = []
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    for q in queries / np.linalg.norm(queries, axis=1, keepdims=True):
        sims = matrix @ q
        top = np.argpartition(-sims, 10)[:10]
        out.append({ids[i] for i in top})
    return out


async def _scope(session: Any, tenant: uuid.UUID) -> Any:
    """The job scope of a bench tenant's one project."""
    project = (
        await session.execute(text("SELECT id FROM projects WHERE tenant_id = :t"), {"t": tenant})
    ).scalar_one()
    return scope_for_job(tenant, project)


async def recall(
    app: Database,
    tenant: uuid.UUID,
    queries: np.ndarray,
    tag: str | None,
    exact_sets: list[set[str]],
) -> tuple[float, float, bool]:
    """Mean recall@10 of find's vector stage (its own statements: the opening
    statement's planner settings, then ``semantic`` on whichever path the
    project's size picks) against ``exact_sets``; the stage's p50 ms; and
    whether it took the HNSW path."""
    hits = 0.0
    times = []
    filters = search_base.Filters(tag_terms=[tag] if tag else ())
    big = False
    for q, exact in zip(queries, exact_sets, strict=True):
        async with tenancy.tenant_id_transaction(app, tenant) as s:
            scope = await _scope(s, tenant)
            opening = await search_base.open_find(s, scope, model=MODEL, candidates=CANDIDATES)
            big = opening.big
            t = time.perf_counter()
            found, _ = await search_base.semantic(
                s,
                scope,
                vector=[float(x) for x in q],
                model=MODEL,
                kinds=["note", "part"],
                filters=filters,
                limit=CANDIDATES,
                big=big,
            )
            times.append((time.perf_counter() - t) * 1000)
        approx = {h.note_id for h in found[:10]}
        hits += len(exact & approx) / max(len(exact), 1)
    return hits / len(queries), pct(times, 50), big


async def text_exactness(
    app: Database, tenants: list[uuid.UUID], questions: list[str], tag: str | None
) -> dict[str, float]:
    """How often the full-text stage's top 10 (MaxScore past SCORE_AT_ONCE
    matches, see app.search.fulltext) equal exact BM25 over every match of the
    same words, on the same filters; how many matches each scored, and the
    stage's time both ways; question i goes to tenant i mod n."""
    same = 0
    scored: list[float] = []
    every: list[float] = []
    fast_ms: list[float] = []
    full_ms: list[float] = []
    filters = search_base.Filters(tag_terms=[tag] if tag else ())
    for i, q in enumerate(questions):
        tenant = tenants[i % len(tenants)]
        async with tenancy.tenant_id_transaction(app, tenant) as s:
            scope = await _scope(s, tenant)
            terms = await search_repo.read_question(s, scope, q)
            if terms is None:
                same += 1
                continue
            args = {"kinds": ["note", "part"], "filters": filters, "limit": 100}
            t = time.perf_counter()
            fast = await search_repo.full_text(s, scope, terms, **args)
            fast_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            full = await search_repo.full_text(s, scope, terms, exact=True, **args)
            full_ms.append((time.perf_counter() - t) * 1000)
        same += [h.note_id for h in fast.hits[:10]] == [h.note_id for h in full.hits[:10]]
        scored.append(fast.scored)
        every.append(full.scored)
    n = len(questions)
    return {
        "same_top10": same / n,
        "scored_p50": pct(scored, 50),
        "scored_p95": pct(scored, 95),
        "every_match_p50": pct(every, 50),
        "every_match_p95": pct(every, 95),
        "stage_ms_p50": pct(fast_ms, 50),
        "stage_ms_p95": pct(fast_ms, 95),
        "exact_stage_ms_p50": pct(full_ms, 50),
        "exact_stage_ms_p95": pct(full_ms, 95),
    }


async def http_latency(
    url: str, keys: list[str], questions: list[str], concurrency: int, extra: dict
) -> dict[str, float]:
    """find over HTTP; query i is asked with key i mod len(keys) (one tenant, or
    the 100 small tenants in turn)."""
    client_ms: list[float] = []
    server_ms: list[float] = []
    parts: dict[str, list[float]] = {}
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for i, q in enumerate(questions):
        queue.put_nowait((i, q))

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:

        async def worker() -> None:
            while not queue.empty():
                i, q = queue.get_nowait()
                headers = {"Authorization": f"Bearer {keys[i % len(keys)]}"}
                t = time.perf_counter()
                r = await client.post(
                    "/v1/search", json={"query": q, "limit": 10, **extra}, headers=headers
                )
                client_ms.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                for name, ms in re.findall(
                    r"(\w+);dur=([\d.]+)", r.headers.get("server-timing", "")
                ):
                    parts.setdefault(name, []).append(float(ms))
                if "app" in parts:
                    server_ms.append(parts["app"][-1])

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "finds_per_s": len(questions) / elapsed,
        "server_p50": pct(server_ms, 50),
        "server_p95": pct(server_ms, 95),
        "server_p99": pct(server_ms, 99),
        "client_p50": pct(client_ms, 50),
        "client_p95": pct(client_ms, 95),
        "client_p99": pct(client_ms, 99),
        # where the server spent it (Server-Timing parts), p50 each
        "parts_p50": {name: pct(ms, 50) for name, ms in parts.items() if name != "app"},
    }


def memory(stack: Any, url: str, key: str) -> dict[str, float]:
    """Resident memory of the API (after the finds above) and of a worker that
    has loaded its model and embedded a put into the full table."""
    import psutil

    from bench.pipeline import put_all, wait_embedded

    api = stack.procs[0]
    worker = stack.start_worker()
    probe = f"mem-probe-{uuid.uuid4().hex}"  # new each run: a reused stack has the old one
    asyncio.run(put_all(url, key, [{"id": probe, "content": "memory probe"}], 1))
    wait_embedded(stack, probe, 1, timeout=300)
    return {
        "api_rss": psutil.Process(api.pid).memory_info().rss / 2**20,
        "worker_rss": psutil.Process(worker.pid).memory_info().rss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--synthetic",
        type=int,
        default=0,
        help="SYNTHETIC notes added to the big tenant (the 1M latency run), see synthetic()",
    )
    parser.add_argument("--recall-queries", type=int, default=100)
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="keep the loaded stack here and reuse it on the next run (iterating on find)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="phases to skip, comma-separated: recall, text, latency, c8, small, fresh, memory",
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    texts = corpus()
    need = args.notes + args.queries
    texts = texts[:need]
    vecs = embeddings(texts)
    docs, dvecs = texts[: args.notes], vecs[: args.notes]
    qtexts, qvecs = texts[args.notes :], vecs[args.notes :]
    results: dict[str, object] = {
        "machine": machine(),
        "notes": args.notes,
        "queries": len(qtexts),
        "corpus": "Python docstrings",
        "synthetic_notes_in_big_tenant": args.synthetic,
        "api_processes": Settings().api_workers,
    }

    encoder = MiniLMEncoder(threads=2, batch_size=8)
    encoder.encode(["warm"])
    q_ms = []
    for q in qtexts[:100]:
        t = time.perf_counter()
        encoder.encode([q])
        q_ms.append((time.perf_counter() - t) * 1000)
    results["query_embedding_ms"] = {"p50": pct(q_ms, 50), "p95": pct(q_ms, 95)}

    with running_stack(args.data_dir) as stack:
        url = stack.start_api()
        owner = Database(stack.pg.url("postgres"))
        app = Database(stack.pg.url("keepmem_app"))
        saved = stack.dir / "bench-keys.json"
        reuse = saved.exists()
        if reuse:
            big_id, big_key, small_keys = json.loads(saved.read_text())
        else:
            big_id, big_key = stack.tenant_key("big")
            small_keys = [stack.tenant_key(f"s{i}") for i in range(100)]
        small = [uuid.UUID(t) for t, _ in small_keys]
        big = uuid.UUID(big_id)

        async def load() -> dict[str, float]:
            async with owner.engine.begin() as c:
                # Loading is faster without the two big indexes; they are
                # rebuilt below exactly as the migrations define them.
                fts_index = (
                    await c.execute(text("SELECT pg_get_indexdef('ix_notes_fts'::regclass)"))
                ).scalar_one()
                await c.execute(text("DROP INDEX ix_embeddings_hnsw_384"))
                await c.execute(text("DROP INDEX ix_notes_fts"))
                projects = dict(
                    (
                        await c.execute(
                            text("SELECT tenant_id, id FROM projects WHERE slug = 'default'")
                        )
                    ).all()
                )
            t = time.perf_counter()
            await bulk_load(owner, big, projects[big], docs, dvecs)
            if args.synthetic:
                stexts, svecs = synthetic(docs, dvecs, args.synthetic)
                await bulk_load(owner, big, projects[big], stexts, svecs, first_id=len(docs))
            per = args.notes // 100
            for i, tenant in enumerate(small):
                lo = i * per
                await bulk_load(
                    owner,
                    tenant,
                    projects[tenant],
                    docs[lo : lo + per],
                    dvecs[lo : lo + per],
                    first_id=lo,
                    tags=True,
                )
            async with owner.engine.begin() as c:
                await c.execute(text("SET maintenance_work_mem = '2GB'"))
                await c.execute(text("UPDATE notes SET fts = to_tsvector('english', summary)"))
                await c.execute(text(fts_index))
            loaded = time.perf_counter() - t
            t = time.perf_counter()
            async with owner.engine.begin() as c:
                await c.execute(text("SET maintenance_work_mem = '2GB'"))
                await c.execute(
                    text(
                        "CREATE INDEX ix_embeddings_hnsw_384 ON embeddings USING hnsw "
                        "((embedding::vector(384)) vector_cosine_ops) WHERE dim = 384"
                    )
                )
                build = time.perf_counter() - t
                size = (
                    await c.execute(text("SELECT pg_relation_size('ix_embeddings_hnsw_384')"))
                ).scalar_one()
                rows = (await c.execute(text("SELECT count(*) FROM embeddings"))).scalar_one()
                await c.execute(text("ANALYZE"))
            # The big project's common words, as the worker would count them.
            async with tenancy.tenant_id_transaction(app, big) as session:
                t = time.perf_counter()
                common = await search_repo.refresh_term_stats(
                    session, scope_for_job(big, projects[big]), min_notes=2000
                )
                stats_s = time.perf_counter() - t
            # Every project's word counts, as the worker would make them.
            for tenant in small:
                async with tenancy.tenant_id_transaction(app, tenant) as session:
                    await search_repo.refresh_term_stats(
                        session, scope_for_job(tenant, projects[tenant]), min_notes=2000
                    )
            await app.dispose()  # its connections belong to this event loop
            await owner.dispose()
            return {
                "rows": rows,
                "load_s": loaded,
                "build_s": build,
                "size_mb": size / 2**20,
                "term_stats_s": stats_s,
                "common_terms": common,
            }

        if not reuse:
            results["index"] = asyncio.run(load())
            if args.data_dir:
                saved.write_text(json.dumps([big_id, big_key, small_keys]))

        async def recalls() -> dict[str, object]:
            out: dict[str, object] = {}
            asked = qvecs[: args.recall_queries]
            big_ids = [f"n{i}" for i in range(len(docs))]
            big_rows = dvecs
            if args.synthetic:
                big_ids += [f"n{len(docs) + i}" for i in range(args.synthetic)]
                big_rows = np.vstack([dvecs, synthetic(docs, dvecs, args.synthetic)[1]])
            big_exact = exact_top10(asked, big_ids, big_rows)
            del big_rows
            per = args.notes // 100  # small tenant 0: its first ``per`` notes, topic t3
            mine = [i for i in range(per) if i % 10 == 3]
            small_exact = exact_top10(asked, [f"n{i}" for i in mine], dvecs[mine])
            for name, tenant, tag, exact in (
                ("big_tenant", big, None, big_exact),
                ("small_tenant_rare_tag", small[0], "topic=t3", small_exact),
            ):
                r, ms, hnsw = await recall(app, tenant, asked, tag, exact)
                out[name] = {"recall@10": r, "stage_p50_ms": ms, "hnsw_path": hnsw}
            await app.dispose()
            return out

        if "recall" not in skip:
            results["recall_vs_exact"] = asyncio.run(recalls())

        async def exactness() -> dict[str, object]:
            out = {
                "big_tenant": await text_exactness(app, [big], qtexts, None),
                "small_tenants_tag": await text_exactness(app, small, qtexts, "topic=t3"),
            }
            await app.dispose()
            return out

        if "text" not in skip:
            results["text_stage_vs_exact_bm25"] = asyncio.run(exactness())
        if "latency" in skip:
            print(json.dumps(results, indent=2))
            return
        # Warm the API's query-embedding caches so timings are the service's
        # own: each API process has its own, and a question reaches one of
        # them at random, so every question is asked several times.
        for _ in range(WARM_PASSES):
            asyncio.run(http_latency(url, [big_key], qtexts, 4, {}))
        lat: dict[str, object] = {}
        levels = (1,) if "c8" in skip else (1, 8)
        for c in levels:
            lat[f"big_tenant_c{c}"] = asyncio.run(http_latency(url, [big_key], qtexts, c, {}))
        keys = [k for _, k in small_keys]
        tag = {"tags": {"topic": "t3"}}
        for c in () if "small" in skip else levels:
            if c == 1:
                for _ in range(WARM_PASSES):
                    asyncio.run(http_latency(url, keys, qtexts, 4, tag))
            lat[f"100_small_tenants_tag_c{c}"] = asyncio.run(
                http_latency(url, keys, qtexts, c, tag)
            )
        if "fresh" not in skip and "small" not in skip:
            # Questions the caches have never seen: each find embeds its own.
            fresh = [f"{q} ({i})" for i, q in enumerate(qtexts)]
            lat["100_small_tenants_tag_c8_fresh_questions"] = asyncio.run(
                http_latency(url, keys, fresh, 8, tag)
            )
        results["find_http_ms"] = lat
        if "memory" not in skip:
            results["memory_mb"] = memory(stack, url, big_key)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
