"""Providers: hosted ones against a local server speaking their wire format,
offline ones for real."""

from __future__ import annotations

import json
import math

import pytest

from app.providers.embedding.base import QueryCache
from app.providers.embedding.base import registry as embedders
from app.providers.errors import MissingDependency, PermanentError, TransientError
from app.providers.registry import Registry
from app.providers.summarization.base import RelatedNote
from app.providers.summarization.base import registry as summarizers
from tests.vendors import Vendor, VendorServer, fake_vector


@pytest.mark.parametrize(
    "name, base_suffix, path",
    [
        ("openai", "/v1", "/v1/embeddings"),
        ("mistral", "/v1", "/v1/embeddings"),
        ("voyage", "/v1", "/v1/embeddings"),
        ("gemini", "/v1beta", "/v1beta/models/text-embedding-004:batchEmbedContents"),
    ],
)
async def test_hosted_embedders_speak_their_wire_format(name, base_suffix, path) -> None:
    with VendorServer(Vendor(dim=8)) as server:
        model = "text-embedding-004" if name == "gemini" else "m-1"
        e = embedders.create(
            name, model=model, dim=8, api_key="sk-test", base_url=server.url + base_suffix
        )
        docs = await e.embed_documents(["alpha", "beta", "gamma"])
        query = await e.embed_query("alpha")
        await e.aclose()
        assert docs == [fake_vector(t, 8) for t in ("alpha", "beta", "gamma")]
        assert query == fake_vector("alpha", 8)
        assert e.model_id == f"{name}:{model}"
        first = server.vendor.requests[0]
        assert first["path"] == path
        if name == "gemini":
            assert first["headers"]["x-goog-api-key"] == "sk-test"
            assert first["body"]["requests"][0]["taskType"] == "RETRIEVAL_DOCUMENT"
            assert server.vendor.requests[1]["body"]["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
        else:
            assert first["headers"]["authorization"] == "Bearer sk-test"
            assert first["body"]["input"] == ["alpha", "beta", "gamma"]
        if name == "voyage":
            assert first["body"]["input_type"] == "document"
            assert server.vendor.requests[1]["body"]["input_type"] == "query"


async def test_embedder_dimension_mismatch_is_permanent() -> None:
    with VendorServer(Vendor(dim=8)) as server:
        e = embedders.create("openai", model="m", dim=16, base_url=server.url + "/v1")
        with pytest.raises(PermanentError, match="8 dims"):
            await e.embed_documents(["x"])
        await e.aclose()


@pytest.mark.parametrize(
    "status, error",
    [(500, TransientError), (429, TransientError), (400, PermanentError), (401, PermanentError)],
)
async def test_http_failures_are_classified(status, error) -> None:
    with VendorServer(Vendor(fail_status=status, fail_times=-1)) as server:
        e = embedders.create("openai", model="m", dim=8, base_url=server.url + "/v1")
        with pytest.raises(error):
            await e.embed_documents(["x"])
        await e.aclose()


async def test_unreachable_vendor_is_transient() -> None:
    e = embedders.create("openai", model="m", dim=8, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(TransientError):
        await e.embed_documents(["x"])
    await e.aclose()


@pytest.mark.parametrize(
    "name, path", [("openai", "/v1/chat/completions"), ("anthropic", "/v1/messages")]
)
async def test_llm_summarizers_pass_related_notes_as_context(name, path) -> None:
    with VendorServer(Vendor(summary="  Kept the PKCE decision.  ")) as server:
        base = server.url + ("/v1" if name == "openai" else "")
        s = summarizers.create(name, model="m-1", api_key="k", base_url=base)
        context = [RelatedNote("auth-1", "OAuth2 needs PKCE", 0.9)]
        out = await s.summarize("Long note text " * 50, max_chars=200, context=context)
        await s.aclose()
        assert out == "Kept the PKCE decision."
        assert s.uses_context
        request = server.vendor.requests[0]
        assert request["path"] == path
        text = json.dumps(request["body"])
        assert "auth-1" in text and "OAuth2 needs PKCE" in text
        if name == "anthropic":
            assert request["headers"]["x-api-key"] == "k"
            assert request["headers"]["anthropic-version"] == "2023-06-01"
            assert request["body"]["system"]
        else:
            assert request["body"]["messages"][0]["role"] == "system"


TEXT = (
    "The migration moved every tenant table to a primary key that starts with tenant_id. "
    "We chose this so that the tables can later be distributed by tenant on Citus. "
    "Lunch was pizza. "
    "Row-level security policies now check tenant_id on every tenant table, using a "
    "per-transaction setting. "
    "The application connects as a role without superuser rights, so the policies apply."
)


async def test_extractive_picks_real_sentences_within_the_limit() -> None:
    s = summarizers.create("extractive")
    out = await s.summarize(TEXT, max_chars=200)
    assert len(out) <= 200
    sentences = [x.strip() for x in TEXT.replace(". ", ".\n").splitlines()]
    picked = [x for x in sentences if x in out]
    assert picked and sum(len(p) for p in picked) + len(picked) - 1 == len(out)
    assert "Lunch was pizza." not in out  # off-topic sentence loses


async def test_other_local_summarizers() -> None:
    text = "# Title\n\nFirst real paragraph of the note has words.\n\nSecond paragraph here."
    assert await summarizers.create("first_paragraph").summarize(text, max_chars=100) == (
        "First real paragraph of the note has words."
    )
    cut = await summarizers.create("truncate").summarize("word " * 100, max_chars=50)
    assert len(cut) <= 50 and cut.endswith("...")
    assert await summarizers.create("passthrough").summarize("short", max_chars=50) == "short"


def test_registry_errors_name_the_missing_package() -> None:
    r: Registry[object] = Registry("thing")
    r.register("ghost", "no_such_module_xyz:Factory", "ghost-package")
    with pytest.raises(MissingDependency, match="ghost-package"):
        r.create("ghost")
    with pytest.raises(PermanentError, match="unknown thing provider"):
        r.create("nope")


async def test_minilm_embeds_by_meaning_offline() -> None:
    e = embedders.create("local")
    assert e.dim == 384 and e.model_id == "local:all-MiniLM-L6-v2"
    a, b, c = await e.embed_documents(
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
        ]
    )
    q = await e.embed_query("A man is eating food.")

    def cos(x, y):
        return sum(i * j for i, j in zip(x, y, strict=True))

    assert math.isclose(math.sqrt(cos(a, a)), 1.0, rel_tol=1e-5)
    # sentence-transformers' documented value for this pair is 0.7553
    assert abs(cos(a, b) - 0.7553) < 0.01
    assert cos(a, b) > 0.5 > cos(a, c)
    assert math.isclose(cos(a, q), 1.0, rel_tol=1e-5)
    # batching and padding do not change a text's vector
    alone = await e.embed_documents(["The girl is carrying a baby."])
    assert max(abs(x - y) for x, y in zip(alone[0], c, strict=True)) < 1e-4
    await e.aclose()


async def test_query_cache_hits() -> None:
    with VendorServer(Vendor(dim=8)) as server:
        e = embedders.create("openai", model="m", dim=8, base_url=server.url + "/v1")
        cache = QueryCache(size=2)
        for q in ["a", "a", "b", "a", "c", "b"]:
            await cache.get(e, q)
        await e.aclose()
        assert cache.hits == 2 and cache.misses == 4
        assert len(server.vendor.requests) == 4
