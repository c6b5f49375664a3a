"""Secrets kept in the database encrypted with a key derived from the
server secret (AES-GCM), so a dump of the database alone reveals none of
them. Each kind of secret has its own purpose label, so keys never cross
kinds; ``bound`` (a key id, a row id) is authenticated with the ciphertext,
so a sealed value cannot be moved to another row."""

from __future__ import annotations

import hashlib
import secrets

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12


def _cipher(server_secret: str, purpose: str) -> AESGCM:
    return AESGCM(hashlib.sha256(purpose.encode() + b"\0" + server_secret.encode()).digest())


def seal(server_secret: str, purpose: str, data: bytes, bound: str) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + _cipher(server_secret, purpose).encrypt(nonce, data, bound.encode())


def unseal(server_secret: str, purpose: str, sealed: bytes, bound: str) -> bytes:
    """The sealed bytes; ``cryptography.exceptions.InvalidTag`` when the
    server secret, the purpose or ``bound`` differ from the sealing ones."""
    cipher = _cipher(server_secret, purpose)
    return cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], bound.encode())
