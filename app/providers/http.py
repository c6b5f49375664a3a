"""Shared HTTP plumbing for hosted providers: one error mapping for all vendors."""

from __future__ import annotations

from typing import Any

import httpx

from app.providers.errors import PermanentError, TransientError


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    json: dict[str, Any],
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    vendor: str,
) -> dict[str, Any]:
    """POST and return the JSON body; map failures to transient or permanent."""
    try:
        response = await client.post(url, json=json, headers=headers, params=params)
    except (httpx.TimeoutException, httpx.TransportError) as exc:
        raise TransientError(f"{vendor}: {type(exc).__name__}: {exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise TransientError(f"{vendor}: HTTP {response.status_code}: {response.text[:300]}")
    if response.status_code >= 400:
        raise PermanentError(f"{vendor}: HTTP {response.status_code}: {response.text[:300]}")
    try:
        body = response.json()
    except ValueError as exc:
        raise TransientError(f"{vendor}: response is not JSON") from exc
    if not isinstance(body, dict):
        raise PermanentError(f"{vendor}: unexpected response shape")
    return body


def client(timeout: float = 60.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))
