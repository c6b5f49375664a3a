"""Timestamps in keep's wire format: UTC, ``YYYY-MM-DDTHH:MM:SS``, no suffix."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from app.errors import BadRequest

# Times a client may send (created_at, since, until): wide enough for any
# history, narrow enough that date arithmetic and time zones never overflow.
EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def keep_ts(value: datetime) -> str:
    """A timestamp as keep's system tags carry it."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def keep_date(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d")


def in_range(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"time out of range: use years {EARLIEST.year} to {LATEST.year - 1}")
    return value


def parse_timestamp(value: str) -> datetime:
    """Parse an ISO-8601 date or timestamp; naive values are taken as UTC.

    ValueError when it is not one, or lies outside EARLIEST..LATEST."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return in_range(parsed.astimezone(UTC))
    except OverflowError as exc:
        raise ValueError("time out of range") from exc


def parse_instant(value: str) -> datetime:
    """An ISO-8601 date-time that names its time zone (``Z`` or an offset),
    in UTC. ValueError when it is not one, has no zone, or is out of range."""
    parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("needs a time zone")
    try:
        return in_range(parsed.astimezone(UTC))
    except OverflowError as exc:
        raise ValueError("time out of range") from exc


def ago(now: datetime, **parts: int) -> datetime:
    """``now`` minus a duration; ValueError when that leaves the allowed range."""
    try:
        return in_range(now - timedelta(**parts))
    except OverflowError as exc:
        raise ValueError("duration out of range") from exc


_DURATION = re.compile(
    r"^P(?:(?P<y>\d+)Y)?(?:(?P<mo>\d+)M)?(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?:(?P<h>\d+)H)?(?:(?P<mi>\d+)M)?(?:(?P<s>\d+)S)?)?$"
)


def parse_when(value: str, *, now: datetime | None = None) -> datetime:
    """An ISO-8601 duration back from now (``P3D``, ``PT1H``, ``P1W``) or a date."""
    text = value.strip()
    m = _DURATION.match(text.upper())
    try:
        if m and text.upper() not in ("P", "PT"):
            parts = {k: int(v) if v else 0 for k, v in m.groupdict().items()}
            return ago(
                now or utcnow(),
                days=parts["y"] * 365 + parts["mo"] * 30 + parts["w"] * 7 + parts["d"],
                hours=parts["h"],
                minutes=parts["mi"],
                seconds=parts["s"],
            )
        return parse_timestamp(text)
    except ValueError as exc:
        raise BadRequest(
            f"invalid time {value[:80]!r}: use an ISO-8601 duration (P3D, PT1H, P1W) or a "
            f"date ({exc})"
        ) from exc
