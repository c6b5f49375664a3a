"""Sanitising at ingest: private spans and secrets of each kind never reach
the database, the summarizer, the embedder or a provider."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app import tenancy
from app.kit import redaction
from app.models import TENANT_TABLES
from tests.test_pipeline import put, run_all

# Real-looking (made-up) secrets of each kind, in the formats providers document.
SECRETS = {
    "openai-key": "sk-proj-4fJ9kQ2mX7vR1tY8wZ3nB6cD0eH5gL2aP9sU",
    "anthropic-key": "sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed8Cb7",
    "aws-access-key": "AKIAIOSFODNN7EXAMPLQ",
    "github-token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "slack-token": "xoxb-2648120917-1234567890123-AbCdEfGhIjKlMnOp",
    "stripe-key": "sk_live_51H8xYzAbCdEfGhIjKlMnOpQr",
    "google-api-key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "huggingface-token": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
        ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ),
}
KEY_BLOCK = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBQ0tfkq3y0cM7cq3wQe8sJk3nfRZ1Zl0yE6b1Y2pWqvQAAAJhq0xmJatMZ\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
BEARER = "Authorization: Bearer 8f3a9c2e7b1d4f6a0e5c9b2d7a4f1e3c"
URL = "postgres://admin:Tr0ub4dor-3xyz@db.internal:5432/prod"
ASSIGNED = 'db_password = "hunter2-correct-horse"'
PRIVATE = "Lunch at noon. <private>my therapist is Dr. Quinn</private> Then gym."


@pytest.mark.parametrize(("kind", "secret"), sorted(SECRETS.items()))
def test_each_token_kind_is_redacted(kind: str, secret: str) -> None:
    report = redaction.Report()
    out = redaction.clean(f"the key is {secret} ok", report)
    assert secret not in out and f"[REDACTED:{kind}]" in out, out
    assert out.startswith("the key is ") and out.endswith(" ok")
    assert report.redacted == {kind: 1}


def test_blocks_urls_bearer_assignments_and_private_spans() -> None:
    report = redaction.Report()
    out = redaction.clean("\n".join([KEY_BLOCK, BEARER, URL, ASSIGNED, PRIVATE]), report)
    for secret in ("b3BlbnNzaC1rZXkt", "8f3a9c2e7b1d4f6a", "Tr0ub4dor", "hunter2", "Dr. Quinn"):
        assert secret not in out
    assert "[REDACTED:private-key]" in out
    assert "Authorization: Bearer [REDACTED:bearer-token]" in out
    assert "postgres://admin:[REDACTED:url-password]@db.internal:5432/prod" in out
    assert 'db_password = "[REDACTED:password]"' in out
    assert "Lunch at noon.  Then gym." in out
    assert report.private_spans == 1
    assert set(report.redacted) == {"private-key", "bearer-token", "url-password", "password"}
    # an unclosed private span runs to the end
    assert redaction.clean("keep <private>drop all of this") == "keep "


def test_ordinary_prose_is_left_alone() -> None:
    prose = (
        "The password policy says: at least 12 characters. Ask Skye about the sk-8 board. "
        "Tokens of appreciation were given. See https://example.com/a:b@c for details."
    )
    assert redaction.clean(prose) == prose


def everything() -> str:
    return "\n".join([*SECRETS.values(), KEY_BLOCK, BEARER, URL, ASSIGNED, PRIVATE])


async def _all_rows(db, tenant) -> str:
    dump = []
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        for table in TENANT_TABLES:
            rows = await s.execute(text(f"SELECT t::text FROM {table} t"))
            dump.extend(rows.scalars())
    return "\n".join(dump)


def _leaks(stored: str) -> list[str]:
    probes = [*SECRETS.values(), "b3BlbnNzaC1rZXkt", "8f3a9c2e7b1d4f6a", "Tr0ub4dor", "hunter2"]
    return [p for p in [*probes, "Dr. Quinn"] if p in stored]


async def test_secrets_never_reach_the_database(client, tenant, db, make_pipeline) -> None:
    long_text = ("Deploy notes for the billing service. " * 20) + everything()
    await put(client, tenant, content=long_text, id="deploy", tags={"env": SECRETS["openai-key"]})
    await put(client, tenant, content="short " + SECRETS["jwt"], summary=BEARER, id="s")
    await put(
        client,
        tenant,
        content="A page.",
        uri="https://bob:Tr0ub4dor-3xyz@example.com/page",
    )
    r = await client.patch(
        "/v1/notes/s/tags", json={"set": {"token": SECRETS["github-token"]}}, headers=tenant.headers
    )
    assert r.status_code == 200
    r = await client.post(
        "/v1/tasks",
        json={"task_type": "summarize", "content": "Summarise: " + everything()},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    # the worker's summaries, parts and vectors are made from the clean text too
    await run_all(make_pipeline(), client, tenant)
    r = await client.post("/v1/analyze", json={"id": "deploy"}, headers=tenant.headers)
    await run_all(make_pipeline(), client, tenant)
    stored = await _all_rows(db, tenant)
    assert "deploy" in stored and "[REDACTED:" in stored
    assert _leaks(stored) == []
    got = await client.get(
        "/v1/notes/https%3A%2F%2Fbob%40example.com%2Fpage", headers=tenant.headers
    )
    assert got.status_code == 200, got.text


async def test_a_project_can_turn_sanitising_off(client, tenant) -> None:
    r = await client.patch("/v1/settings", json={"sanitize": False}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    await put(client, tenant, content="raw " + SECRETS["aws-access-key"], id="raw")
    got = (await client.get("/v1/notes/raw", headers=tenant.headers)).json()
    assert SECRETS["aws-access-key"] in got["summary"]


async def test_secrets_inside_documents_never_reach_the_database(
    client, tenant, db, make_pipeline
) -> None:
    from tests import docs
    from tests.docserver import serving

    word = docs.docx_file(
        title="Runbook " + SECRETS["github-token"],
        author="ops",
        paragraphs=["Rotate the key " + SECRETS["openai-key"], KEY_BLOCK, PRIVATE],
        table=[["db", URL], ["token", SECRETS["slack-token"]]],
    )
    r = await client.post(
        "/v1/upload",
        files={"file": ("runbook.docx", word, "application/octet-stream")},
        data={"tags": '{"note": "' + SECRETS["stripe-key"] + '"}'},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    pdf = docs.text_pdf(["Call the API with " + SECRETS["jwt"], ASSIGNED], title="Keys", author="x")
    page = (
        "<html><head><title>Config</title></head><body><p>"
        + SECRETS["anthropic-key"]
        + "</p><p>"
        + BEARER
        + "</p></body></html>"
    )
    with serving() as web:
        await put(client, tenant, uri=web.add("/k.pdf", pdf, "application/pdf"))
        await put(client, tenant, uri=web.add("/c.html", page, "text/html"))
        await run_all(make_pipeline(fetch_allow_networks=["127.0.0.1/32"]), client, tenant)
    await run_all(make_pipeline(), client, tenant)
    stored = await _all_rows(db, tenant)
    assert "Rotate the key [REDACTED:openai-key]" in stored
    assert _leaks(stored) == []
    assert "hunter2" not in stored and SECRETS["jwt"][:40] not in stored
