"""What access control costs (issue 16): tag scopes, OAuth tokens, usage
counting, each against a baseline in the same run.

    .venv/bin/python -m bench.access [--notes 4000] [--queries 150] [--puts 300]

One tenant, LoCoMo turns as notes, half tagged user=alice and half
user=bob, embedded by a worker. Then, server-side time (Server-Timing):

1. find and list with an API key (unscoped), an OAuth access token
   (unscoped) and alice's tag-scoped key, interleaved query by query;
2. the tag-scope policies' cost to unscoped work: find with the restrictive
   policies present and dropped (as the schema owner), alternated twice;
3. the usage triggers' cost to puts: put latency with the triggers enabled
   and disabled, alternated twice.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import httpx

from bench.common import locomo_turns, machine, pct, running_stack
from bench.pipeline import wait_embedded

USAGE_TRIGGERS = ("notes", "note_versions", "parts", "jobs")


def server_ms(response: httpx.Response) -> float:
    timing = response.headers.get("server-timing", "")
    for entry in timing.split(","):
        name, _, dur = entry.strip().partition(";dur=")
        if name == "app":
            return float(dur)
    raise RuntimeError(f"no server timing: {response.status_code} {response.text[:200]}")


def line(name: str, values: list[float], base: list[float] | None = None) -> str:
    ratio = ""
    if base:
        ratio = f" | {statistics.median(values) / statistics.median(base):.2f}x"
    head = f"| {name} | {pct(values, 50):.1f} | {pct(values, 95):.1f} | {len(values)}"
    return f"{head}{ratio or ' | '} |"


def load(http: httpx.Client, url: str, key: str, turns: list[dict]) -> None:
    auth = {"Authorization": f"Bearer {key}"}
    for start in range(0, len(turns), 100):
        notes = [
            {
                "id": f"t-{i}",
                "content": t["text"],
                "tags": {"user": "alice" if i % 2 == 0 else "bob", "speaker_name": t["speaker"]},
            }
            for i, t in enumerate(turns[start : start + 100], start=start)
        ]
        r = http.post(f"{url}/v1/notes/batch", headers=auth, json={"notes": notes})
        r.raise_for_status()


def finds(http, url, headers, queries) -> list[float]:
    out = []
    for q in queries:
        r = http.post(f"{url}/v1/search", headers=headers, json={"query": q, "limit": 10})
        r.raise_for_status()
        out.append(server_ms(r))
    return out


def policies(stack) -> list[str]:
    """CREATE statements of the tag-scope policies, to drop and put back."""
    rows = stack.sql(
        "SELECT string_agg(format('CREATE POLICY %I ON %I AS RESTRICTIVE FOR %s TO %s %s %s', "
        "policyname, tablename, cmd, array_to_string(roles, ', '), "
        "coalesce('USING (' || qual || ')', ''), "
        "coalesce('WITH CHECK (' || with_check || ')', '')), chr(30)) "
        "FROM pg_policies WHERE policyname LIKE 'tag_scope%'"
    )
    return [r for r in rows.split(chr(30)) if r.strip()]


def drop_policies(stack) -> None:
    rows = stack.sql(
        "SELECT format('DROP POLICY %I ON %I', policyname, tablename) FROM pg_policies "
        "WHERE policyname LIKE 'tag_scope%'"
    )
    for statement in rows.splitlines():
        stack.sql(statement)


def triggers(stack, on: bool) -> None:
    verb = "ENABLE" if on else "DISABLE"
    for table in USAGE_TRIGGERS:
        stack.sql(f"ALTER TABLE {table} {verb} TRIGGER count_usage")


def puts(http, url, headers, n: int, tag: str) -> list[float]:
    out = []
    for i in range(n):
        r = http.post(
            f"{url}/v1/notes",
            headers=headers,
            json={"id": f"p-{tag}-{i}", "content": f"put {tag} {i} about the river trip"},
        )
        r.raise_for_status()
        out.append(server_ms(r))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notes", type=int, default=4000)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--puts", type=int, default=300)
    args = ap.parse_args()
    turns = locomo_turns()[: args.notes]
    rng = random.Random(16)
    queries = [" ".join(t["text"].split()[:8]) for t in rng.sample(turns, args.queries)]
    with running_stack() as stack, httpx.Client(timeout=120) as http:
        url = stack.start_api()
        _, key = stack.tenant_key()
        owner = {"Authorization": f"Bearer {key}"}
        worker = stack.start_worker()
        load(http, url, key, turns)
        wait_embedded(stack, "t-", len(turns))
        worker.terminate()
        worker.wait(timeout=30)
        alice = http.post(
            f"{url}/v1/subkeys",
            headers=owner,
            json={"name": "alice", "tags": {"user": "alice"}, "expires_in_seconds": 86400},
        ).json()["key"]
        svc = http.post(
            f"{url}/v1/oauth/clients",
            headers=owner,
            json={"name": "bench", "project": "default", "scopes": ["read", "write"]},
        ).json()
        token = http.post(
            f"{url}/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(svc["client_id"], svc["client_secret"]),
        ).json()["access_token"]
        creds = {
            "API key": owner,
            "OAuth token": {"Authorization": f"Bearer {token}"},
            "tag-scoped key (half the notes)": {"Authorization": f"Bearer {alice}"},
        }
        finds(http, url, owner, queries[:20])  # warm up
        found: dict[str, list[float]] = {name: [] for name in creds}
        listed: dict[str, list[float]] = {name: [] for name in creds}
        for q in queries:  # interleaved, query by query
            for name, headers in creds.items():
                found[name] += finds(http, url, headers, [q])
                r = http.get(f"{url}/v1/notes", headers=headers, params={"limit": 50})
                listed[name].append(server_ms(r))
        saved = policies(stack)
        with_policies: list[float] = []
        without: list[float] = []
        for _ in range(2):
            with_policies += finds(http, url, owner, queries)
            drop_policies(stack)
            without += finds(http, url, owner, queries)
            for statement in saved:
                stack.sql(statement)
        counted: list[float] = []
        uncounted: list[float] = []
        for round_ in range(2):
            counted += puts(http, url, owner, args.puts // 2, f"on{round_}")
            triggers(stack, on=False)
            uncounted += puts(http, url, owner, args.puts // 2, f"off{round_}")
            triggers(stack, on=True)
    print(f"\n## Access control costs ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(f"`python -m bench.access --notes {args.notes} --queries {args.queries} "
          f"--puts {args.puts}` on {machine()}; server-side ms (Server-Timing)\n")  # fmt: skip
    print("| what | p50 | p95 | n | vs baseline |\n|---|---|---|---|---|")
    base = found["API key"]
    for name in creds:
        print(line(f"find, {name}", found[name], base if name != "API key" else None))
    for name in creds:
        print(line(f"list 50, {name}", listed[name], listed["API key"]))
    print(line("find, tag-scope policies dropped (baseline)", without))
    print(line("find, tag-scope policies present", with_policies, without))
    print(line("put, usage triggers disabled (baseline)", uncounted))
    print(line("put, usage triggers enabled", counted, uncounted))


if __name__ == "__main__":
    main()
