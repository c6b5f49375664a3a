"""Token-signing keys: RSA (RS256) keys with a ``kid``, the newest signs,
recently retired ones still verify, all published as a JWKS.

Private halves are stored encrypted (AES-GCM, a key derived from the server
secret), so a database dump alone cannot mint tokens. ``keepmem oauth
rotate-key`` makes a new signing key and retires the others; a retired key
verifies for one access-token lifetime more, then leaves the JWKS.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from joserfc.jwk import Key, KeySet, RSAKey
from sqlalchemy.ext.asyncio import AsyncSession

from app import sealing
from app.oauth import repository as repo

ALG = "RS256"
_CACHE_SECONDS = 30.0
_RELOAD_SECONDS = 1.0


PURPOSE = "keepmem-oauth-keys"  # the sealing key's label (app.sealing)


def _seal(server_secret: str, pem: bytes, kid: str) -> bytes:
    return sealing.seal(server_secret, PURPOSE, pem, kid)


def _open(server_secret: str, sealed: bytes, kid: str) -> bytes:
    return sealing.unseal(server_secret, PURPOSE, sealed, kid)


@dataclass(slots=True)
class _Loaded:
    at: float
    signing: RSAKey | None
    public: KeySet
    jwks: dict[str, Any]


class Keyring:
    """Per process: the keys, loaded from the database and cached briefly."""

    def __init__(self, server_secret: str, *, access_ttl_s: int) -> None:
        self._secret = server_secret
        self._ttl = access_ttl_s
        self._loaded: _Loaded | None = None

    def forget(self) -> None:
        self._loaded = None

    async def _load(self, session: AsyncSession) -> _Loaded:
        now = time.monotonic()
        if self._loaded is not None and now - self._loaded.at < _CACHE_SECONDS:
            return self._loaded
        rows = await repo.signing_keys(session, retired_within_s=self._ttl + 60)
        signing = None
        for row in rows:
            if row.retired_at is None:
                pem = _open(self._secret, row.private_key, row.kid)
                signing = RSAKey.import_key(pem, parameters={"kid": row.kid, "alg": ALG})
                break
        public: list[Key] = [RSAKey.import_key(row.public_jwk) for row in rows]
        self._loaded = _Loaded(
            at=now,
            signing=signing,
            public=KeySet(public),
            jwks={"keys": [row.public_jwk for row in rows]},
        )
        return self._loaded

    async def signing_key(self, session: AsyncSession) -> RSAKey:
        """The key that signs now; made on first use."""
        loaded = await self._load(session)
        if loaded.signing is None:
            await self.rotate(session)
            loaded = await self._load(session)
        assert loaded.signing is not None
        return loaded.signing

    async def verifying_keys(self, session: AsyncSession, *, kid: str | None = None) -> KeySet:
        """The keys that verify; asked for a ``kid`` it does not hold, it
        re-reads them (another process may have rotated), at most once a second."""
        loaded = await self._load(session)
        known = any(k.kid == kid for k in loaded.public)
        if kid is not None and not known and time.monotonic() - loaded.at > _RELOAD_SECONDS:
            self.forget()
            loaded = await self._load(session)
        return loaded.public

    async def jwks(self, session: AsyncSession) -> dict[str, Any]:
        await self.signing_key(session)
        return (await self._load(session)).jwks

    async def rotate(self, session: AsyncSession) -> str:
        """A new signing key; the others retire (they verify for one token lifetime)."""
        kid = secrets.token_urlsafe(12)
        key = RSAKey.generate_key(
            2048, parameters={"kid": kid, "use": "sig", "alg": ALG}, private=True
        )
        await repo.insert_key(
            session,
            kid=kid,
            private_key=_seal(self._secret, key.as_pem(private=True), kid),
            public_jwk=key.as_dict(private=False),
        )
        await repo.retire_keys_except(session, kid)
        self.forget()
        return kid
