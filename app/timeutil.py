"""Timestamps in keep's wire format: UTC, ``YYYY-MM-DDTHH:MM:SS``, no suffix."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def keep_ts(value: datetime) -> str:
    """A timestamp as keep's system tags carry it."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def keep_date(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d")


def parse_timestamp(value: str) -> datetime:
    """Parse an ISO-8601 date or timestamp; naive values are taken as UTC."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
