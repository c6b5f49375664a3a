"""keepmem as an OAuth protected resource (RFC 8707, RFC 9728): the
resource URLs its own access tokens are minted for and checked against.

This server has two: the REST API, named by its base URL (the issuer), and
the MCP endpoint, ``<base>/mcp``. The protected-resource metadata names
them, ``/oauth/authorize`` and ``/oauth/token`` refuse a ``resource`` that
is neither (``invalid_target``), and the token verifier refuses a token of
keepmem's whose ``aud`` is neither. The base is ``KEEPMEM_PUBLIC_URL``;
unset, the URL a request reached (so a token works at the address it was
issued for).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MCP_PATH = "/mcp"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def issuer_of(public_url: str | None, base_url: str) -> str:
    """The issuer (and the base of every OAuth URL): the configured public
    URL, else the request's own base URL."""
    return (public_url or base_url).rstrip("/")


def canonical(url: str) -> str | None:
    """A resource URL compared as RFC 3986 §6.2.2-3 allows: scheme and host
    lower case, no default port, no trailing slash. None for anything that
    is not an absolute http(s) URL without a fragment (RFC 8707 §2)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or "#" in url:
        return None
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        return None
    return urlunsplit((scheme, host, parts.path.rstrip("/"), parts.query, ""))


def resources_of(issuer: str) -> frozenset[str]:
    """This server's resource URLs (canonical): the REST API and ``/mcp``."""
    base = issuer.rstrip("/")
    return frozenset(c for c in (canonical(base), canonical(base + MCP_PATH)) if c is not None)


def is_ours(resource: str, resources: frozenset[str]) -> bool:
    """Whether a resource indicator or an ``aud`` value names this server."""
    return canonical(resource) in resources
