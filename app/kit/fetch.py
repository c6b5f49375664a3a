"""Fetching a URI without being turned against our own network (SSRF).

Every hop is checked before anything is sent: the scheme must be http or
https; the host is resolved and *every* address it resolves to must be a
public one — loopback, private, link-local (cloud metadata at
169.254.169.254), CGNAT, multicast, reserved and IPv4-mapped forms of them are
refused unless an allow-list in the settings names them. The connection then
goes to the checked address itself (the URL's host is kept for the Host
header and TLS), so a second DNS answer cannot swap in another address.
Redirects are followed by hand, each one checked the same way. The body is
streamed and reading stops at the size limit; the whole fetch has one
deadline; only the content types keepmem can read are accepted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

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


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # after redirects
    content_type: str  # media type, lower case, no parameters
    charset: str | None
    data: bytes


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT (RFC 2765)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries and may be routed to: mapped
    (::ffff:a.b.c.d), translated (::ffff:0:a.b.c.d), compatible (::a.b.c.d),
    NAT64 (64:ff9b::/96 and the local-use 64:ff9b:1::/48), 6to4 (2002::/16)
    and Teredo (2001::/32: the server and the obfuscated client)."""
    out: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are not IPv4
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip in _IPV4_TRANSLATED or any(ip in net for net in _NAT64):
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    return out


def is_public(ip: IPAddress) -> bool:
    """A globally routable unicast address, and so is every IPv4 address an
    IPv6 one embeds (NAT64, 6to4, Teredo, mapped or compatible forms reach
    the IPv4 host through a gateway: 64:ff9b::7f00:1 is 127.0.0.1)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner:
            return all(is_public(v4) for v4 in inner)
    return ip.is_global and not ip.is_multicast


def allowed(ip: IPAddress, policy: FetchPolicy) -> bool:
    return is_public(ip) or any(ip in net for net in policy.allow if ip.version == net.version)


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
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


async def check(url: str, policy: FetchPolicy) -> tuple[str, IPAddress]:
    """(host, the address to connect to) for a URL that may be fetched, or FetchRefused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URIs can be fetched, not {parts.scheme!r}")
    if not parts.hostname:
        raise FetchRefused(f"URI has no host: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = await _resolve(parts.hostname, port)
    if not addresses:
        raise FetchRefused(f"host {parts.hostname!r} has no address")
    refused = [ip for ip in addresses if not allowed(ip, policy)]
    if refused:
        raise FetchRefused(
            f"refusing to fetch {parts.hostname!r}: it resolves to {refused[0]}, "
            "a loopback, private, link-local or otherwise non-public address"
        )
    return parts.hostname, addresses[0]


def _pinned(url: str, ip: IPAddress) -> str:
    parts = urlsplit(url)
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


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
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False
    ) as client:
        for _ in range(policy.max_redirects + 1):
            host, ip = await check(url, policy)
            parts = urlsplit(url)
            headers = {
                "Host": parts.netloc.rsplit("@", 1)[-1],
                "User-Agent": policy.user_agent,
                "Accept": ACCEPT,
            }
            extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
            try:
                async with client.stream(
                    "GET", _pinned(url, ip), headers=headers, extensions=extensions
                ) as response:
                    if response.status_code in REDIRECTS and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
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
    host, ip = await check(url, policy)
    parts = urlsplit(url)
    sent = {
        **headers,
        "Host": parts.netloc.rsplit("@", 1)[-1],
        "User-Agent": policy.user_agent,
        "Content-Type": "application/json",
    }
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    try:
        # Streamed and never read: a receiver's answer body is not wanted.
        async with (
            asyncio.timeout(policy.timeout_seconds),
            httpx.AsyncClient(
                transport=transport, follow_redirects=False, trust_env=False
            ) as client,
            client.stream(
                "POST", _pinned(url, ip), content=body, headers=sent, extensions=extensions
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
