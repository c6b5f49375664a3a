"""Every block of IANA's IPv4 and IPv6 special-purpose address registries
(plus multicast) is refused by the one URL judge, for a fetched document and
for a webhook, at registration and at delivery; IPv6 forms that carry an
IPv4 address are judged by it; and the one URL parser turns every string
into an accepted target or a refusal, never another error."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.kit.fetch import (
    EMBEDDED,
    SPECIAL_PURPOSE,
    FetchPolicy,
    FetchRefused,
    check,
    fetch,
    is_public,
    parse,
    refusal,
    special_block,
)
from app.main import create_app
from tests.test_pipeline import jobs_of, put, run_all
from tests.test_webhooks import _deliver, _deliveries, _hook, _put

STRICT = FetchPolicy.of(max_bytes=2**20, timeout_seconds=5, allow_networks=[])

# (block as IANA lists it, an address in it that keepmem must refuse). The
# rows are written from the registries themselves, not from app.kit.fetch:
# test_the_judge_covers_every_block_here holds the two lists equal.
BLOCKS: list[tuple[str, str]] = [
    ("0.0.0.0/8", "0.1.2.3"),
    ("0.0.0.0/32", "0.0.0.0"),
    ("10.0.0.0/8", "10.1.2.3"),
    ("100.64.0.0/10", "100.64.0.1"),
    ("127.0.0.0/8", "127.0.0.1"),
    ("169.254.0.0/16", "169.254.169.254"),
    ("172.16.0.0/12", "172.31.255.254"),
    ("192.0.0.0/24", "192.0.0.192"),  # a cloud metadata address; is_global says True
    ("192.0.0.0/29", "192.0.0.1"),
    ("192.0.0.8/32", "192.0.0.8"),
    ("192.0.0.9/32", "192.0.0.9"),  # PCP anycast: globally reachable, refused all the same
    ("192.0.0.10/32", "192.0.0.10"),
    ("192.0.0.170/32", "192.0.0.170"),
    ("192.0.0.171/32", "192.0.0.171"),
    ("192.0.2.0/24", "192.0.2.1"),
    ("192.31.196.0/24", "192.31.196.1"),
    ("192.52.193.0/24", "192.52.193.1"),
    ("192.88.99.0/24", "192.88.99.1"),
    ("192.88.99.2/32", "192.88.99.2"),
    ("192.168.0.0/16", "192.168.1.1"),
    ("192.175.48.0/24", "192.175.48.1"),
    ("198.18.0.0/15", "198.19.255.1"),
    ("198.51.100.0/24", "198.51.100.1"),
    ("203.0.113.0/24", "203.0.113.1"),
    ("224.0.0.0/4", "239.255.255.250"),
    ("240.0.0.0/4", "240.0.0.1"),
    ("255.255.255.255/32", "255.255.255.255"),
    ("::1/128", "::1"),
    ("::/128", "::"),
    ("::ffff:0:0/96", "::ffff:169.254.169.254"),  # judged by the IPv4 inside
    ("64:ff9b::/96", "64:ff9b::c000:c0"),  # NAT64 of 192.0.0.192
    ("64:ff9b:1::/48", "64:ff9b:1::808:808"),  # local-use: refused whatever it carries
    ("100::/64", "100::1"),
    ("100:0:0:1::/64", "100:0:0:1::1"),
    ("2001::/23", "2001:5::1"),
    ("2001::/32", "2001:0:4136:e378:8000:63bf:80ff:fffe"),  # Teredo, client 127.0.0.1
    ("2001:1::1/128", "2001:1::1"),
    ("2001:1::2/128", "2001:1::2"),
    ("2001:1::3/128", "2001:1::3"),
    ("2001:2::/48", "2001:2::1"),
    ("2001:3::/32", "2001:3::1"),
    ("2001:4:112::/48", "2001:4:112::1"),
    ("2001:10::/28", "2001:10::1"),
    ("2001:20::/28", "2001:20::1"),
    ("2001:30::/28", "2001:30::1"),
    ("2001:db8::/32", "2001:db8::1"),
    ("2002::/16", "2002:c000:c0::1"),  # 6to4 of 192.0.0.192
    ("2620:4f:8000::/48", "2620:4f:8000::1"),
    ("3fff::/20", "3fff::1"),
    ("5f00::/16", "5f00::1"),
    ("fc00::/7", "fd00:ec2::254"),  # the IPv6 metadata address of one cloud
    ("fe80::/10", "fe80::1"),
    ("ff00::/8", "ff02::1"),
]

# Neither public nor in the registries: deprecated or unallocated IPv6.
OUTSIDE_GLOBAL_UNICAST = ["::8.8.8.8", "::ffff:0:808:808", "fec0::1", "4000::1", "c000::1"]

# Forms that carry a public IPv4 address stay public; so do public addresses.
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
    "2001:0:4136:e378:8000:63bf:f7f7:f7f7",  # Teredo: server and client public
]


def _url(address: str, path: str = "/") -> str:
    ip = ipaddress.ip_address(address)
    return f"http://[{ip}]{path}" if ip.version == 6 else f"http://{ip}{path}"


class Recorder(httpx.AsyncBaseTransport):
    """Stands where the network would be: anything handed to it was sent."""

    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return httpx.Response(200, text="reached", headers={"content-type": "text/plain"})


def test_the_judge_covers_every_block_here() -> None:
    judged = {str(block.network) for block in SPECIAL_PURPOSE}
    assert judged == {str(ipaddress.ip_network(block)) for block, _ in BLOCKS}


@pytest.mark.parametrize(("block", "address"), BLOCKS, ids=[b for b, _ in BLOCKS])
def test_every_special_purpose_block_is_refused(block: str, address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert ip in ipaddress.ip_network(block)
    assert special_block(ip) is not None
    assert refusal(ip) is not None and not is_public(ip)


@pytest.mark.parametrize(("block", "address"), BLOCKS, ids=[b for b, _ in BLOCKS])
async def test_fetch_refuses_every_block_without_connecting(block: str, address: str) -> None:
    network = Recorder()
    with pytest.raises(FetchRefused, match="refusing"):
        await fetch(_url(address, "/latest/meta-data/"), STRICT, transport=network)
    assert network.sent == []


@pytest.mark.parametrize(("block", "address"), BLOCKS, ids=[b for b, _ in BLOCKS])
async def test_webhook_registration_refuses_every_block(
    client: httpx.AsyncClient, tenant: Any, block: str, address: str
) -> None:
    r = await client.post("/v1/webhooks", json={"url": _url(address, "/hook")},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "bad_request" and "refused" in r.json()["error"]
    listed = await client.get("/v1/webhooks", headers=tenant.headers)
    assert listed.json()["webhooks"] == []


@pytest.mark.parametrize("address", OUTSIDE_GLOBAL_UNICAST)
async def test_ipv6_outside_global_unicast_is_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    with pytest.raises(FetchRefused, match="refusing"):
        await check(_url(address), STRICT)


@pytest.mark.parametrize("address", PUBLIC)
async def test_public_addresses_and_forms_carrying_them_pass(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))
    target, ip = await check(_url(address), STRICT)
    assert ip == ipaddress.ip_address(address) and target.ip == ip


def test_embedded_forms_name_what_they_carry() -> None:
    why = refusal(ipaddress.ip_address("64:ff9b::7f00:1"))
    assert why is not None and "127.0.0.1" in why and "loopback" in why
    embedded = {str(b.network) for b in SPECIAL_PURPOSE if b.rule == EMBEDDED}
    assert embedded == {"::ffff:0:0/96", "64:ff9b::/96", "2001::/32", "2002::/16"}


async def test_an_operator_allowance_still_opens_a_block() -> None:
    allowing = FetchPolicy.of(max_bytes=1024, timeout_seconds=5, allow_networks=["192.0.0.0/24"])
    _, ip = await check("http://192.0.0.192/x", allowing)
    assert str(ip) == "192.0.0.192"
    with pytest.raises(FetchRefused):
        await check("http://192.0.2.1/x", allowing)


# Hosts that name 192.0.0.192 without being an address literal: the system
# resolver reads them as numbers, so the judge sees them as DNS answers.
RESOLVED_TO_METADATA = ["http://3221225664/", "http://0xc0.0.0.0xc0/", "http://192.0.192/"]


@pytest.mark.parametrize("url", RESOLVED_TO_METADATA)
async def test_resolved_special_addresses_are_refused(url: str, client, tenant) -> None:
    network = Recorder()
    with pytest.raises(FetchRefused, match=r"resolves to 192\.0\.0\.192"):
        await fetch(url, STRICT, transport=network)
    assert network.sent == []
    r = await client.post("/v1/webhooks", json={"url": url}, headers=tenant.headers)
    assert r.status_code == 400 and "192.0.0.192" in r.json()["error"], r.text


async def test_a_note_uri_in_192_0_0_is_never_fetched(client, tenant, make_pipeline) -> None:
    await put(client, tenant, uri="http://192.0.0.192/latest/meta-data/")
    await run_all(make_pipeline(), client, tenant)
    (job,) = await jobs_of(client, tenant, kind="fetch")
    assert job["status"] == "dead" and job["attempts"] == 1, job
    assert "refusing" in job["last_error"] and "192.0.0.0/24" in job["last_error"]


async def test_a_webhook_whose_host_resolves_to_a_special_block_is_not_delivered(
    settings, db, tenant, make_pipeline
) -> None:
    """Registered while the operator allowed 192.0.0.0/24, delivered after
    the allowance was withdrawn: the delivery resolves the host again and
    refuses (dead at once, a permanent error), connecting nowhere."""
    allowing = settings.model_copy(update={"fetch_allow_networks": ["192.0.0.0/24"]})
    app = create_app(allowing, db=db)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        hook = await _hook(http, tenant, "http://3221225664/hook")
        await _put(http, tenant, "s-1")
        assert await _deliver(make_pipeline(), http, tenant, hook) == ["dead"]
        [dead] = await _deliveries(http, tenant, hook)
    assert dead["attempts"] == 1
    assert "refusing" in dead["last_error"] and "192.0.0.192" in dead["last_error"]


# -- the parser ---------------------------------------------------------------------

MALFORMED = [
    "http://example.com:99999/",
    "http://example.com:0/",
    "http://example.com:-1/",
    "http://example.com:8o/",
    "http://[::1/",
    "http://[::1]x/",
    "http://[v1.x]/",
    "http://[1.2.3.4]/",
    "http://[fe80::1%25eth0]/",
    "http://.../",
    "http://a..b/",
    "http://" + "a" * 64 + ".com/",
    "http://exa mple.com/",
    "http://exa\x00mple.com/",
    "http://exa\nmple.com/",
    "http://example.com/\tpath",
    "http://example.com/\x7f",
    "http://example.com/\x85",
    " http://example.com/",
    "http://%31%32%37.0.0.1/",
    "http://ex*ample.com/",
    "http:///path",
    "http://user@/",
    "http://x\ud800y.com/",
]


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_urls_are_refusals(url: str) -> None:
    with pytest.raises(FetchRefused, match="malformed URL"):
        parse(url)


def test_what_the_parser_keeps() -> None:
    target = parse("https://bob:secret@Exämple.COM:8443/a b?q=1#frag")
    assert (target.scheme, target.host, target.port) == ("https", "xn--exmple-cua.com", 8443)
    assert target.path == "/a b?q=1" and target.ip is None
    assert target.authority == "xn--exmple-cua.com:8443"  # never the credentials
    literal = parse("http://[2606:4700:4700::1111]:80")
    assert literal.authority == "[2606:4700:4700::1111]" and literal.path == "/"
    assert literal.pinned(ipaddress.ip_address("2606:4700::1")) == "http://[2606:4700::1]:80/"


_URL_PIECES = st.sampled_from(
    ["http://", "https://", "HTTP://", "http:", "ftp://", "//", "", "[", "]", ":", "@", "%",
     "::1", "1.2.3.4", "example.com", ".", "/", "?", "#", ":80", ":99999", "\x00", "\n",
     " ", "é", "\ud800", "xn--", "0x7f", "[::ffff:1.2.3.4]", "a" * 70]
)  # fmt: skip
URLISH = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(_URL_PIECES, st.text(max_size=6)), max_size=8).map("".join),
)


@given(url=URLISH)
@settings(max_examples=1500, deadline=None, database=None)
def test_every_string_is_a_target_or_a_refusal(url: str) -> None:
    try:
        target = parse(url)
    except FetchRefused:
        return
    assert target.scheme in ("http", "https") and 0 < target.port < 65536
    assert target.path.startswith("/")
    # what was accepted makes a request httpx can send, Host header included
    ip = target.ip or ipaddress.ip_address("192.0.2.1")
    httpx.Request("GET", target.pinned(ip), headers={"Host": target.authority})


@given(ip=st.ip_addresses())
@settings(max_examples=3000, deadline=None, database=None)
def test_every_address_gets_a_verdict(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    why = refusal(ip)
    block = special_block(ip)
    if block is not None and block.rule != EMBEDDED:
        assert why is not None
    if why is None:
        assert ip.is_global and not ip.is_multicast
