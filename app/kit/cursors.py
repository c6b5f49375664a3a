"""Cursors over rows numbered by a sequence every tenant shares (the audit
log, the change feed).

Such a row's ``id`` is never shown: between two of a tenant's rows it grows
by every other tenant's activity. The API shows the row's random
``public_id`` instead, and a cursor is the public id of the last row seen,
as text; a service looks that row up inside the caller's tenant (and
project) to recover its position. Clients treat a cursor as opaque and hand
back what they were given.
"""

from __future__ import annotations

import re
import uuid

from app.errors import CursorExpired, InvalidCursor
from app.kit.storable import INT64_MAX

#: The change feed's cursor for "from the beginning" (keep's protocol, §3.5).
START = "0"

#: What an old numeric cursor (the row's number, before cursors were ids)
#: parses to: the nil UUID, which no row has (``gen_random_uuid()`` makes
#: version 4 ids), so it is looked up and not found, like a dropped row's.
#: A client that saved one across the upgrade is told its place is lost
#: (keep's mirror rebuilds) rather than that it sent garbage.
FORMER = uuid.UUID(int=0)

_HEX = "[0-9a-fA-F]"
_CANONICAL = re.compile(f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}")


def show(public_id: uuid.UUID) -> str:
    """A row's public id as the API shows it: its id, and the cursor after it."""
    return str(public_id)


def parse(raw: str, *, name: str = "cursor") -> uuid.UUID:
    """The public id a cursor carries (:data:`FORMER` for an old numeric
    one); InvalidCursor (a 400 naming ``name``) for anything else: negative
    or 64-bit-overflowing numbers, other text, other spellings of a UUID."""
    text = raw.strip()
    if _CANONICAL.fullmatch(text):
        return uuid.UUID(text)
    if text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= INT64_MAX:
        return FORMER
    raise InvalidCursor(
        f"invalid {name} {raw[:40]!r}: pass a cursor or id this API returned, unchanged"
    )


def parse_feed(raw: str, *, name: str = "cursor") -> uuid.UUID | None:
    """A change-feed cursor: None for :data:`START`, else its public id."""
    return None if raw.strip() == START else parse(raw, name=name)


def expired(name: str, raw: str, *, restart: str) -> CursorExpired:
    """The 400 for a well-formed cursor whose row is not (or no longer) there."""
    return CursorExpired(
        f"{name} {raw[:40]!r} names nothing kept here (dropped by retention or erasure, "
        f"another project's, or a number from before cursors were ids): {restart}"
    )
