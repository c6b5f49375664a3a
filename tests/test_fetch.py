"""Fetching URIs: SSRF refusals (before anything is sent), redirects checked
hop by hop, size and time limits, content types."""

from __future__ import annotations

import ipaddress
import time

import pytest

from app.kit.fetch import FetchFailed, FetchPolicy, FetchRefused, check, fetch, is_public
from tests.docserver import serving

LOCAL = FetchPolicy.of(max_bytes=2**20, timeout_seconds=10, allow_networks=["127.0.0.1/32"])
STRICT = FetchPolicy.of(max_bytes=2**20, timeout_seconds=10, allow_networks=[])


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
    ],
)
def test_non_public_addresses(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


def test_public_addresses() -> None:
    assert is_public(ipaddress.ip_address("93.184.215.14"))
    assert is_public(ipaddress.ip_address("2606:4700:4700::1111"))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.0.0.1/internal",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[::1]:8080/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://localhost/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "http://0x7f.1/",
    ],
)
async def test_private_targets_are_refused_before_any_request(url: str) -> None:
    with pytest.raises(FetchRefused, match=r"refusing|resolve"):
        await fetch(url, STRICT)


async def test_only_http_and_https() -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://x/"):
        with pytest.raises(FetchRefused, match="only http and https"):
            await check(url, STRICT)


async def test_the_local_server_itself_is_refused_by_default() -> None:
    with serving() as web:
        url = web.add("/a.txt", "hello", "text/plain")
        with pytest.raises(FetchRefused):
            await fetch(url, STRICT)
        assert web.routes.hits == []  # nothing was sent


async def test_allowed_fetch_and_checked_redirects() -> None:
    with serving() as web:
        target = web.add("/a.html", "<p>hello</p>", "text/html; charset=utf-8")
        hop = web.redirect("/go", "/a.html")
        got = await fetch(hop, LOCAL)
        assert got.url == target and got.data == b"<p>hello</p>"
        assert got.content_type == "text/html" and got.charset == "utf-8"
        for bad in ("http://169.254.169.254/latest/meta-data", "http://10.0.0.1/", "file:///etc/x"):
            web.redirect("/evil", bad, status=301)
            with pytest.raises(FetchRefused):
                await fetch(web.url + "/evil", LOCAL)
        web.redirect("/loop", "/loop")
        with pytest.raises(FetchRefused, match="redirects"):
            await fetch(web.url + "/loop", LOCAL)


async def test_a_10_gb_response_is_cut_off_at_the_limit() -> None:
    with serving() as web:
        # It says 10 GB up front: refused on the header.
        with pytest.raises(FetchRefused, match="limit is 1048576"):
            await fetch(web.url + "/huge", LOCAL)
        # Without a length: reading stops at the limit.
        t = time.perf_counter()
        with pytest.raises(FetchRefused, match="reading stopped"):
            await fetch(web.url + "/endless", LOCAL)
        assert time.perf_counter() - t < 5
        time.sleep(0.2)
        assert web.routes.sent.get("/huge", 0) < 64 * 2**20
        assert web.routes.sent["/endless"] < 64 * 2**20  # nowhere near 10 GB


async def test_types_errors_and_time() -> None:
    with serving() as web:
        web.add("/bin", b"\x00\x01", "application/octet-stream")
        with pytest.raises(FetchRefused, match="cannot read"):
            await fetch(web.url + "/bin", LOCAL)
        web.add("/gone", "no", "text/plain", status=404)
        with pytest.raises(FetchRefused, match="HTTP 404"):
            await fetch(web.url + "/gone", LOCAL)
        web.add("/err", "no", "text/plain", status=503)
        with pytest.raises(FetchFailed, match="HTTP 503"):
            await fetch(web.url + "/err", LOCAL)
        slow = FetchPolicy.of(max_bytes=2**40, timeout_seconds=0.5, allow_networks=["127.0.0.1/32"])
        with pytest.raises(FetchFailed, match="longer than"):
            await fetch(web.url + "/endless", slow)
