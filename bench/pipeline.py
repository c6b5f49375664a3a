"""Pipeline benchmark: put -> embedded, against raw model throughput.

    .venv/bin/python -m bench.pipeline [--notes 2000] [--rate 20] [--seconds 30]

1. Raw throughput of the embedding model (MiniLM, onnxruntime) on the same
   texts in this process: the ceiling.
2. Bulk: a worker running, N LoCoMo turns put over HTTP at concurrency 8;
   notes/s from the first put to the last note embedded, and its ratio to (1).
   The same through the batch endpoint (100 notes a request). Drain: the same
   N notes put (in batches) while the worker is paused, which also gives the
   batch endpoint's own rate, then notes/s from resuming it to the last
   embedded: the pipeline's own overhead over (1).
3. Steady load: puts paced at --rate per second for --seconds; put
   acknowledgement latency and put -> embedded latency, p50 / p95.
4. Resident memory of the worker and API processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time

import httpx
import psutil

from app.providers.embedding.minilm import MiniLMEncoder
from bench.common import locomo_turns, machine, pct, running_stack, summary


def raw_throughput(texts: list[str]) -> dict[str, float]:
    """The model's best: all texts at once, sorted by length, the best batch size."""
    batched = 0.0
    for size in (8, 16, 32):
        encoder = MiniLMEncoder(threads=2, batch_size=size)
        encoder.encode(texts[:64])  # load and warm up
        t = time.perf_counter()
        encoder.encode(texts)
        batched = max(batched, len(texts) / (time.perf_counter() - t))
    sample = texts[:300]
    t = time.perf_counter()
    for text in sample:
        encoder.encode([text])
    single = len(sample) / (time.perf_counter() - t)
    return {"batched_texts_per_s": batched, "one_at_a_time_texts_per_s": single}


async def post_all(
    url: str, key: str, path: str, bodies: list[dict], concurrency: int
) -> list[float]:
    """POST each body to ``path``, ``concurrency`` at a time; latency of each (ms)."""
    latencies: list[float] = []
    queue: asyncio.Queue[dict] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    headers = {"Authorization": f"Bearer {key}"}

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            t = time.perf_counter()
            r = await client.post(path, json=body, headers=headers)
            latencies.append((time.perf_counter() - t) * 1000)
            r.raise_for_status()
            if path.endswith("/batch"):
                assert r.json()["failed"] == 0, r.text

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
    return latencies


async def put_all(url: str, key: str, notes: list[dict], concurrency: int) -> list[float]:
    return await post_all(url, key, "/v1/notes", notes, concurrency)


async def put_batches(
    url: str, key: str, notes: list[dict], concurrency: int, size: int = 100
) -> list[float]:
    """POST /v1/notes/batch, ``size`` notes a request; latency per request."""
    batches = [{"notes": notes[i : i + size]} for i in range(0, len(notes), size)]
    return await post_all(url, key, "/v1/notes/batch", batches, concurrency)


async def paced(url: str, key: str, notes: list[dict], rate: float) -> list[float]:
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        start = time.perf_counter()
        tasks = []

        async def one(note: dict) -> None:
            t = time.perf_counter()
            r = await client.post("/v1/notes", json=note, headers=headers)
            latencies.append((time.perf_counter() - t) * 1000)
            r.raise_for_status()

        for i, note in enumerate(notes):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(note)))
        await asyncio.gather(*tasks)
    return latencies


def wait_embedded(stack, prefix: str, count: int, timeout: float = 900) -> float:
    """Poll over one connection (spawning psql each time would steal CPU)."""
    from sqlalchemy import text

    from app.db import Database

    async def poll() -> float:
        db = Database(stack.pg.url("postgres"))
        try:
            deadline = time.monotonic() + timeout
            n = 0
            async with db.engine.connect() as conn:
                while time.monotonic() < deadline:
                    n = (
                        await conn.execute(
                            text(
                                "SELECT count(*) FROM embeddings WHERE kind = 'note' "
                                "AND note_id LIKE :p"
                            ),
                            {"p": prefix + "%"},
                        )
                    ).scalar_one()
                    await conn.commit()
                    if n >= count:
                        return time.perf_counter()
                    await asyncio.sleep(0.05)
            raise RuntimeError(f"only {n} of {count} embedded in time")
        finally:
            await db.dispose()

    return asyncio.run(poll())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--embedding-threads", type=int, default=2, help="onnxruntime threads in the worker"
    )
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        help="KEEPMEM_X=value for the worker process (repeatable)",
    )
    args = parser.parse_args()

    turns = locomo_turns()
    texts = [t["text"] for t in turns][: args.notes]
    raw = raw_throughput(texts)
    results: dict[str, object] = {"machine": machine(), "notes": len(texts), "raw": raw}

    with running_stack() as stack:
        url = stack.start_api()
        _, key = stack.tenant_key()
        extra = dict(item.split("=", 1) for item in args.worker_env)
        worker = stack.start_worker(KEEPMEM_EMBEDDING_THREADS=str(args.embedding_threads), **extra)
        results["worker_env"] = extra
        # Warm the worker (model load) before timing.
        asyncio.run(put_all(url, key, [{"id": "warm", "content": "warm up the model"}], 1))
        wait_embedded(stack, "warm", 1, timeout=120)

        bulk = [{"id": f"b{i}", "content": text} for i, text in enumerate(texts)]
        t0 = time.perf_counter()
        burst_acks = asyncio.run(put_all(url, key, bulk, args.concurrency))
        t_put = time.perf_counter()
        t_done = wait_embedded(stack, "b", len(bulk))
        throughput = len(bulk) / (t_done - t0)
        results["bulk"] = {
            "notes_per_s": throughput,
            "ratio_to_batched_model": throughput / raw["batched_texts_per_s"],
            "puts_per_s": len(bulk) / (t_put - t0),
            "put_ack_ms_p50": pct(burst_acks, 50),
            "put_ack_ms_p95": pct(burst_acks, 95),
        }

        # Bulk through the batch endpoint (100 notes a request, 2 at a time).
        batched = [{"id": f"k{i}", "content": text + "  "} for i, text in enumerate(texts)]
        t0 = time.perf_counter()
        asyncio.run(put_batches(url, key, batched, 2))
        t_put = time.perf_counter()
        t_done = wait_embedded(stack, "k", len(batched))
        throughput = len(batched) / (t_done - t0)
        results["bulk_batches"] = {
            "notes_per_s": throughput,
            "ratio_to_batched_model": throughput / raw["batched_texts_per_s"],
            "accepted_notes_per_s": len(batched) / (t_put - t0),
        }

        # Drain: the same notes already in the outbox, the worker paused while
        # they are put (SIGSTOP), then timed from resume to the last embedded.
        # The batch endpoint's own rate is measured here, the worker stopped.
        drain_notes = [{"id": f"d{i}", "content": text + " "} for i, text in enumerate(texts)]
        os.kill(worker.pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        batch_ms = asyncio.run(put_batches(url, key, drain_notes, 2))
        results["batch_endpoint"] = {
            "notes_per_s": len(drain_notes) / (time.perf_counter() - t0),
            "request_ms_p50": pct(batch_ms, 50),
            "request_ms_p95": pct(batch_ms, 95),
            "notes_per_request": 100,
            "concurrency": 2,
        }
        t0 = time.perf_counter()
        os.kill(worker.pid, signal.SIGCONT)
        t_done = wait_embedded(stack, "d", len(drain_notes))
        drain = len(drain_notes) / (t_done - t0)
        results["drain"] = {
            "notes_per_s": drain,
            "ratio_to_batched_model": drain / raw["batched_texts_per_s"],
        }

        n_steady = int(args.rate * args.seconds)
        steady_notes = [
            {"id": f"s{i}", "content": turns[(i * 7) % len(turns)]["text"] + f" ({i})"}
            for i in range(n_steady)
        ]
        acks = asyncio.run(paced(url, key, steady_notes, args.rate))
        wait_embedded(stack, "s", n_steady)
        lag = [
            float(x)
            for x in stack.sql(
                "SELECT extract(epoch FROM e.created_at - n.created_at) * 1000 FROM notes n "
                "JOIN embeddings e ON e.note_id = n.id AND e.kind = 'note' AND "
                "e.tenant_id = n.tenant_id WHERE n.id LIKE 's%'"
            ).split()
        ]
        results["steady"] = {
            "rate_per_s": args.rate,
            "notes": n_steady,
            "put_ack_ms_p50": pct(acks, 50),
            "put_ack_ms_p95": pct(acks, 95),
            "put_to_embedded_ms_p50": pct(lag, 50),
            "put_to_embedded_ms_p95": pct(lag, 95),
        }
        # The API on its own: the same paced puts with the worker paused.
        os.kill(worker.pid, signal.SIGSTOP)
        alone = [{"id": f"a{i}", "content": n["content"]} for i, n in enumerate(steady_notes)]
        alone_acks = asyncio.run(paced(url, key, alone, args.rate))
        os.kill(worker.pid, signal.SIGCONT)
        results["steady_api_alone"] = {
            "put_ack_ms_p50": pct(alone_acks, 50),
            "put_ack_ms_p95": pct(alone_acks, 95),
        }
        api = next(p for p in stack.procs if p is not worker)
        results["memory_mb"] = {
            "worker_rss": psutil.Process(worker.pid).memory_info().rss / 2**20,
            "api_rss": psutil.Process(api.pid).memory_info().rss / 2**20,
        }
        print("steady acks:", summary(acks))
        print("steady lag:", summary(lag))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
