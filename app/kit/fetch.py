"""Fetching a URI without being turned against our own network (SSRF).

One parser and one judge serve every outbound request keepmem makes: a
note's URI, each redirect, a webhook when it is registered and at every
delivery. ``parse`` reads the URL (http or https, a real host, a real port)
and turns anything malformed into a FetchRefused; ``check`` resolves the host
and requires *every* address it resolves to be public: outside every block
of IANA's IPv4 and IPv6 special-purpose registries and multicast (the table
below, which keeps 192.0.0.192 and the metadata address 169.254.169.254
out), and for IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4,
Teredo) the IPv4 address too, unless an allow-list in the settings names
the address. The connection then goes to the checked address itself (the
URL's host is kept for the Host header and TLS), so a second DNS answer
cannot swap in another address. Redirects are followed by hand, each one
checked the same way. The body is streamed and reading stops at the size
limit; the whole fetch has one deadline; only the content types keepmem can
read are accepted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from app.providers.errors import PermanentError, TransientError
from app.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

REDIRECTS = (301, 302, 303, 307, 308)
READABLE_TYPES = (
    "text/",
    "application/xhtml+xml",
    "application/xml",
    "application/json",
    "application/pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "image/",
    "audio/",
)

ACCEPT = "text/html, application/xhtml+xml, application/pdf, text/*;q=0.9, */*;q=0.5"


class FetchRefused(PermanentError):
    """The URI (or a redirect) points somewhere keepmem must not go."""


class FetchFailed(TransientError):
    """The server could not be reached or failed; worth another try."""


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    max_bytes: int = 50 * 2**20
    timeout_seconds: float = 30.0
    max_redirects: int = 5
    allow: tuple[IPNetwork, ...] = ()
    user_agent: str = "keepmem-fetch/1 (+https://github.com/keepmem)"

    @classmethod
    def for_settings(
        cls, settings: Settings, *, timeout_seconds: float | None = None
    ) -> FetchPolicy:
        return cls.of(
            max_bytes=settings.fetch_max_bytes,
            timeout_seconds=timeout_seconds or settings.fetch_timeout_seconds,
            allow_networks=settings.fetch_allow_networks,
        )

    @classmethod
    def of(
        cls, *, max_bytes: int, timeout_seconds: float, allow_networks: Sequence[str]
    ) -> FetchPolicy:
        return cls(
            max_bytes=max_bytes,
            timeout_seconds=timeout_seconds,
            allow=tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks),
        )

    def refusal(self, ip: IPAddress) -> str | None:
        """Why ``ip`` may not be connected to under this policy (None: it may):
        a network the operator allows is allowed, anything else must be public."""
        if any(ip in net for net in self.allow if ip.version == net.version):
            return None
        return refusal(ip)


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # after redirects
    content_type: str  # media type, lower case, no parameters
    charset: str | None
    data: bytes


# -- the judge: IANA's special-purpose registries, as data ---------------------------

REFUSE = "refuse"
EMBEDDED = "embedded"  # judged by the IPv4 address it carries


@dataclass(frozen=True, slots=True)
class SpecialBlock:
    network: IPNetwork
    name: str
    reference: str
    globally_reachable: bool | None  # IANA's column (None: N/A)
    rule: str  # REFUSE or EMBEDDED


# Every entry of IANA's IPv4 and IPv6 Special-Purpose Address Registries
# (iana-ipv4-special-registry, iana-ipv6-special-registry; checked against
# the IPv6 update of 2025-10-09), plus the multicast blocks of the address
# space registries. keepmem refuses every one, the ones IANA marks globally
# reachable included: those are protocol anycast and service prefixes (PCP,
# TURN, AS112, AMT, ORCHIDv2, drone ids) that hold no document to fetch and
# run no webhook receiver, and a memory service loses nothing by refusing
# them. The exceptions are the forms that carry an IPv4 address a gateway
# routes to (mapped, the well-known NAT64 prefix, 6to4, Teredo): they are
# judged by that address, so 64:ff9b::808:808 is 8.8.8.8 and 64:ff9b::7f00:1
# is loopback. The local-use NAT64 prefix is refused outright: its operator
# picks where in the /48 the IPv4 address sits, so it cannot be read back.
# fmt: off
_REGISTRY: tuple[tuple[str, str, str, bool | None, str], ...] = (
    # block               name                                    reference   reach  rule
    ("0.0.0.0/8",          "this network",                         "RFC 791",  False, REFUSE),
    ("0.0.0.0/32",         "this host on this network",            "RFC 1122", False, REFUSE),
    ("10.0.0.0/8",         "private-use",                          "RFC 1918", False, REFUSE),
    ("100.64.0.0/10",      "shared address space (CGNAT)",         "RFC 6598", False, REFUSE),
    ("127.0.0.0/8",        "loopback",                             "RFC 1122", False, REFUSE),
    ("169.254.0.0/16",     "link-local (cloud metadata)",          "RFC 3927", False, REFUSE),
    ("172.16.0.0/12",      "private-use",                          "RFC 1918", False, REFUSE),
    ("192.0.0.0/24",       "IETF protocol assignments",            "RFC 6890", False, REFUSE),
    ("192.0.0.0/29",       "IPv4 service continuity prefix",       "RFC 7335", False, REFUSE),
    ("192.0.0.8/32",       "IPv4 dummy address",                   "RFC 7600", False, REFUSE),
    ("192.0.0.9/32",       "Port Control Protocol anycast",        "RFC 7723", True,  REFUSE),
    ("192.0.0.10/32",      "TURN anycast",                         "RFC 8155", True,  REFUSE),
    ("192.0.0.170/32",     "NAT64/DNS64 discovery",                "RFC 8880", False, REFUSE),
    ("192.0.0.171/32",     "NAT64/DNS64 discovery",                "RFC 8880", False, REFUSE),
    ("192.0.2.0/24",       "documentation (TEST-NET-1)",           "RFC 5737", False, REFUSE),
    ("192.31.196.0/24",    "AS112-v4",                             "RFC 7535", True,  REFUSE),
    ("192.52.193.0/24",    "AMT",                                  "RFC 7450", True,  REFUSE),
    ("192.88.99.0/24",     "deprecated 6to4 relay anycast",        "RFC 7526", None,  REFUSE),
    ("192.88.99.2/32",     "6a44 relay anycast",                   "RFC 6751", False, REFUSE),
    ("192.168.0.0/16",     "private-use",                          "RFC 1918", False, REFUSE),
    ("192.175.48.0/24",    "AS112 direct delegation",              "RFC 7534", True,  REFUSE),
    ("198.18.0.0/15",      "benchmarking",                         "RFC 2544", False, REFUSE),
    ("198.51.100.0/24",    "documentation (TEST-NET-2)",           "RFC 5737", False, REFUSE),
    ("203.0.113.0/24",     "documentation (TEST-NET-3)",           "RFC 5737", False, REFUSE),
    ("224.0.0.0/4",        "multicast",                            "RFC 5771", None,  REFUSE),
    ("240.0.0.0/4",        "reserved",                             "RFC 1112", False, REFUSE),
    ("255.255.255.255/32", "limited broadcast",                    "RFC 919",  False, REFUSE),
    ("::1/128",            "loopback",                             "RFC 4291", False, REFUSE),
    ("::/128",             "unspecified address",                  "RFC 4291", False, REFUSE),
    ("::ffff:0:0/96",      "IPv4-mapped address",                  "RFC 4291", False, EMBEDDED),
    ("64:ff9b::/96",       "NAT64 well-known prefix",              "RFC 6052", True,  EMBEDDED),
    ("64:ff9b:1::/48",     "local-use NAT64 prefix",               "RFC 8215", False, REFUSE),
    ("100::/64",           "discard-only",                         "RFC 6666", False, REFUSE),
    ("100:0:0:1::/64",     "dummy IPv6 prefix",                    "RFC 9780", False, REFUSE),
    ("2001::/23",          "IETF protocol assignments",            "RFC 2928", False, REFUSE),
    ("2001::/32",          "Teredo",                               "RFC 4380", None,  EMBEDDED),
    ("2001:1::1/128",      "Port Control Protocol anycast",        "RFC 7723", True,  REFUSE),
    ("2001:1::2/128",      "TURN anycast",                         "RFC 8155", True,  REFUSE),
    ("2001:1::3/128",      "DNS-SD service registration anycast",  "RFC 9665", True,  REFUSE),
    ("2001:2::/48",        "benchmarking",                         "RFC 5180", False, REFUSE),
    ("2001:3::/32",        "AMT",                                  "RFC 7450", True,  REFUSE),
    ("2001:4:112::/48",    "AS112-v6",                             "RFC 7535", True,  REFUSE),
    ("2001:10::/28",       "deprecated ORCHID",                    "RFC 4843", None,  REFUSE),
    ("2001:20::/28",       "ORCHIDv2",                             "RFC 7343", True,  REFUSE),
    ("2001:30::/28",       "drone remote ID entity tags",          "RFC 9374", True,  REFUSE),
    ("2001:db8::/32",      "documentation",                        "RFC 3849", False, REFUSE),
    ("2002::/16",          "6to4",                                 "RFC 3056", None,  EMBEDDED),
    ("2620:4f:8000::/48",  "AS112 direct delegation",              "RFC 7534", True,  REFUSE),
    ("3fff::/20",          "documentation",                        "RFC 9637", False, REFUSE),
    ("5f00::/16",          "segment routing (SRv6) SIDs",          "RFC 9602", False, REFUSE),
    ("fc00::/7",           "unique-local",                         "RFC 4193", False, REFUSE),
    ("fe80::/10",          "link-local",                           "RFC 4291", False, REFUSE),
    ("ff00::/8",           "multicast",                            "RFC 4291", None,  REFUSE),
)
# fmt: on

SPECIAL_PURPOSE: tuple[SpecialBlock, ...] = tuple(
    SpecialBlock(ipaddress.ip_network(block), name, ref, reachable, rule)
    for block, name, ref, reachable, rule in _REGISTRY
)
# IANA allocates IPv6 unicast from 2000::/3 only; outside it (and outside the
# forms above) an address is reserved, deprecated (IPv4-compatible ::a.b.c.d,
# site-local fec0::/10) or unallocated.
IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")


def special_block(ip: IPAddress) -> SpecialBlock | None:
    """The most specific special-purpose block holding ``ip``, if any."""
    best: SpecialBlock | None = None
    for block in SPECIAL_PURPOSE:
        inside = block.network.version == ip.version and ip in block.network
        if inside and (best is None or block.network.prefixlen > best.network.prefixlen):
            best = block
    return best


def _embedded(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return ip.teredo  # the server and the (de-obfuscated) client
    if ip in _NAT64_WELL_KNOWN:
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    return ()


def refusal(ip: IPAddress) -> str | None:
    """Why keepmem must not connect to ``ip``, or None for a public unicast
    address. An IPv6 form that carries an IPv4 address is judged by that
    address (every one it carries, for Teredo's server and client)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        return "a scoped (zone) address"
    block = special_block(ip)
    if block is not None and block.rule == EMBEDDED and isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded(ip)
        if not inner:
            return f"{block.name} without an IPv4 address in it"
        for v4 in inner:
            why = refusal(v4)
            if why is not None:
                return f"{block.name} of {v4}, {why}"
        return None
    if block is not None:
        return f"a special-purpose address ({block.name}, {block.network}, {block.reference})"
    if isinstance(ip, ipaddress.IPv6Address) and ip not in IPV6_GLOBAL_UNICAST:
        return f"outside IPv6 global unicast ({IPV6_GLOBAL_UNICAST})"
    if not ip.is_global:  # a second opinion: Python's own list
        return "not globally routable"
    return None


def is_public(ip: IPAddress) -> bool:
    """A globally routable unicast address outside every special-purpose block."""
    return refusal(ip) is None


# -- the parser: every string is an accepted Target or a FetchRefused -------------------

MAX_URL_CHARS = 8192
DEFAULT_PORTS = {"http": 80, "https": 443}
# C0 and C1 controls and DEL: urlsplit silently drops some (a tab, a newline)
# and keeps others, so "exa\nmple.com" would name one host here and another
# in whatever reads the stored URL next.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_HOSTPORT = re.compile(r"(\[[^\[\]]+\]|[^\[\]:]+)(:[0-9]*)?")


@dataclass(frozen=True, slots=True)
class Target:
    """A URL the parser accepted, in the parts a request is built from."""

    scheme: str  # http or https
    host: str  # a lower-case ASCII (IDNA) name, or an IP address without brackets
    port: int
    path: str  # path and query, "/" at least
    ip: IPAddress | None  # the host, when it is an address literal

    @property
    def authority(self) -> str:
        """The Host header: what the URL named, never its credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    def pinned(self, ip: IPAddress) -> str:
        """The URL with the checked address in place of the name, so a second
        DNS answer cannot swap in another address."""
        host = f"[{ip}]" if ip.version == 6 else str(ip)
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def _malformed(url: str, why: str) -> FetchRefused:
    return FetchRefused(f"malformed URL {url[:200]!r}: {why}")


def _host(url: str, netloc: str, hostname: str) -> tuple[str, IPAddress | None]:
    hostport = netloc.rpartition("@")[2]
    if not _HOSTPORT.fullmatch(hostport):  # urlsplit ignores what follows "[...]"
        raise _malformed(url, f"{hostport[:100]!r} is not host[:port]")
    if hostport.startswith("["):
        try:
            v6 = ipaddress.IPv6Address(hostname)
        except ValueError:
            raise _malformed(url, "the bracketed host is not an IPv6 address") from None
        if v6.scope_id is not None:
            raise _malformed(url, "an IPv6 zone names a local interface")
        return str(v6), v6
    try:
        v4 = ipaddress.IPv4Address(hostname)
    except ValueError:
        pass
    else:
        return str(v4), v4
    try:
        name = hostname.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise _malformed(url, f"the host is not a valid name ({exc})") from None
    labels = name.removesuffix(".").split(".")
    if len(name) > 254 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _malformed(url, "the host is not a valid name")
    return name, None


def parse(url: str) -> Target:
    """The one reading of a URL keepmem may connect to: http or https, a host
    that is a DNS name or an IP address, a port from 1 to 65535. Anything
    else is a FetchRefused that says what is wrong, never another error."""
    if len(url) > MAX_URL_CHARS:
        raise _malformed(url, f"longer than {MAX_URL_CHARS} characters")
    if _CONTROL.search(url) or url != url.strip():
        raise _malformed(url, "control characters or surrounding spaces")
    try:
        url.encode("utf-8")
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range", a lone surrogate
        raise _malformed(url, str(exc)) from None
    if parts.scheme not in DEFAULT_PORTS:
        raise FetchRefused(f"only http and https URIs can be fetched, not {parts.scheme!r}")
    if not hostname:
        raise _malformed(url, "it has no host")
    if port == 0:
        raise _malformed(url, "port 0")
    host, ip = _host(url, parts.netloc, hostname)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not path.startswith("/"):
        raise _malformed(url, "the path must start with /")
    return Target(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme], path, ip)


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchRefused(f"cannot resolve host {host!r}: {exc.strerror}") from exc
    out: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip not in out:
            out.append(ip)
    return out


async def check(url: str, policy: FetchPolicy) -> tuple[Target, IPAddress]:
    """The one judge of a URL keepmem connects to (a document, each redirect,
    a webhook when it is registered and at every delivery): parse it, resolve
    its host, and refuse unless *every* address is allowed. Returns the
    target and the address to connect to; FetchRefused says why not."""
    target = parse(url)
    addresses = [target.ip] if target.ip is not None else await _resolve(target.host, target.port)
    if not addresses:
        raise FetchRefused(f"host {target.host!r} has no address")
    for ip in addresses:
        why = policy.refusal(ip)
        if why is not None and target.ip is not None:
            raise FetchRefused(f"refusing to connect to {target.authority}: {ip} is {why}")
        if why is not None:
            raise FetchRefused(
                f"refusing to connect to {target.host!r}: it resolves to {ip}, {why}"
            )
    return target, addresses[0]


def _follow(url: str, location: str) -> str:
    """Where a redirect goes (checked by the next hop like the first URL)."""
    try:
        return urljoin(url, location)
    except ValueError as exc:
        raise FetchRefused(f"{url} redirected to a malformed URL {location[:200]!r}") from exc


def _media_type(header: str) -> tuple[str, str | None]:
    media, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip("\"'")
    return media.strip().lower(), charset


async def fetch(
    url: str, policy: FetchPolicy, *, transport: httpx.AsyncBaseTransport | None = None
) -> Fetched:
    """GET ``url`` under ``policy``; FetchRefused / FetchFailed say why not."""
    try:
        async with asyncio.timeout(policy.timeout_seconds):
            return await _fetch(url, policy, transport)
    except TimeoutError as exc:
        raise FetchFailed(f"fetching {url} took longer than {policy.timeout_seconds:g} s") from exc


async def _fetch(
    url: str, policy: FetchPolicy, transport: httpx.AsyncBaseTransport | None
) -> Fetched:
    # httpx's own timeouts (5 s each by default) would cut in before the
    # policy's: the policy's deadline is the one overall limit.
    async with httpx.AsyncClient(
        transport=transport,
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(policy.timeout_seconds),
    ) as client:
        for _ in range(policy.max_redirects + 1):
            target, ip = await check(url, policy)
            headers = {"Host": target.authority, "User-Agent": policy.user_agent, "Accept": ACCEPT}
            extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
            try:
                async with client.stream(
                    "GET", target.pinned(ip), headers=headers, extensions=extensions
                ) as response:
                    if response.status_code in REDIRECTS and "location" in response.headers:
                        url = _follow(url, response.headers["location"])
                        continue
                    if response.status_code >= 400:
                        message = f"{url} answered HTTP {response.status_code}"
                        if 400 <= response.status_code < 500 and response.status_code != 429:
                            raise FetchRefused(message)
                        raise FetchFailed(message)
                    media, charset = _media_type(response.headers.get("content-type", ""))
                    if media and not media.startswith(READABLE_TYPES):
                        raise FetchRefused(f"{url} is {media}, which keepmem cannot read")
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > policy.max_bytes:
                        raise FetchRefused(
                            f"{url} is {int(declared)} bytes; the limit is {policy.max_bytes}"
                        )
                    body = bytearray()
                    async for chunk in response.aiter_raw():
                        body += chunk
                        if len(body) > policy.max_bytes:
                            raise FetchRefused(
                                f"{url} sent more than the limit of {policy.max_bytes} bytes; "
                                "reading stopped there"
                            )
                    return Fetched(url, media or "application/octet-stream", charset, bytes(body))
            except httpx.HTTPError as exc:
                raise FetchFailed(f"fetching {url} failed: {type(exc).__name__}: {exc}") from exc
        raise FetchRefused(f"more than {policy.max_redirects} redirects")


async def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    policy: FetchPolicy,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int:
    """POST ``body`` to ``url`` under the same address rules as a fetch (no
    redirects followed: a webhook receiver answers itself). Returns the
    status of a 2xx answer; any other answer is FetchFailed (worth another
    try), an address keepmem must not reach FetchRefused."""
    target, ip = await check(url, policy)
    sent = {
        **headers,
        "Host": target.authority,
        "User-Agent": policy.user_agent,
        "Content-Type": "application/json",
    }
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    try:
        # Streamed and never read: a receiver's answer body is not wanted.
        async with (
            asyncio.timeout(policy.timeout_seconds),
            httpx.AsyncClient(
                transport=transport,
                follow_redirects=False,
                trust_env=False,
                timeout=httpx.Timeout(policy.timeout_seconds),
            ) as client,
            client.stream(
                "POST", target.pinned(ip), content=body, headers=sent, extensions=extensions
            ) as response,
        ):
            status = response.status_code
    except TimeoutError as exc:
        raise FetchFailed(f"{url} did not answer within {policy.timeout_seconds:g} s") from exc
    except httpx.HTTPError as exc:
        raise FetchFailed(f"posting to {url} failed: {type(exc).__name__}: {exc}") from exc
    if not 200 <= status < 300:
        raise FetchFailed(f"{url} answered HTTP {status}")
    return status
