"""API key material: generation and keyed hashing.

A key looks like ``km_<8-char prefix>_<40-char secret>``. Only
HMAC-SHA256(server secret, key) is stored, so a database dump alone cannot be
used to authenticate, and the prefix lets people tell keys apart.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string

_ALPHABET = string.ascii_lowercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits
KEY_PREFIX = "km_"


def generate_key() -> tuple[str, str]:
    """Return ``(full_key, visible_prefix)``."""
    prefix = KEY_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(8))
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))
    return f"{prefix}_{secret}", prefix


def hash_key(server_secret: str, key: str) -> bytes:
    return hmac.new(server_secret.encode(), key.encode(), hashlib.sha256).digest()


def looks_like_key(key: str) -> bool:
    return 0 < len(key) <= 200 and key.isascii() and key.isprintable()
