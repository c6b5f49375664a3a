"""Access tokens presented to the API: keepmem's own (signed by the keyring,
naming their grant) or an external OpenID Connect issuer's that a tenant
trusts. Both resolve to the same ``TenantScope`` an API key does.

Every failure is a 401 whose message says what is wrong (expired, revoked,
unknown issuer, bad signature) and nothing about other tenants.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import Unauthorized
from app.kit import tags as tagrules
from app.models import OAuthIssuer
from app.oauth import repository as repo
from app.oauth.keyring import ALG, Keyring
from app.tenancy import ALL_SCOPES, TenantScope, mint_tenant

LEEWAY_S = 30
EXTERNAL_ALGS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA"]


def looks_like_jwt(presented: str) -> bool:
    return presented.count(".") == 2 and len(presented) < 16_384


def _header(token: str) -> dict[str, Any]:
    try:
        return dict(jws.extract_compact(token.encode()).headers())
    except (JoseError, ValueError, UnicodeError) as exc:
        raise Unauthorized("invalid access token") from exc


def _unverified_claims(token: str) -> dict[str, Any]:
    try:
        payload = jws.extract_compact(token.encode()).payload
        claims = json.loads(payload)
    except (JoseError, ValueError, UnicodeError) as exc:
        raise Unauthorized("invalid access token") from exc
    if not isinstance(claims, dict):
        raise Unauthorized("invalid access token")
    return claims


def _decode(token: str, keys: KeySet, algorithms: Sequence[str]) -> dict[str, Any]:
    try:
        claims = dict(jwt.decode(token, keys, algorithms=list(algorithms)).claims)
    except (JoseError, ValueError) as exc:
        raise Unauthorized("invalid access token: signature does not verify") from exc
    try:
        JWTClaimsRegistry(leeway=LEEWAY_S, exp={"essential": True}).validate(claims)
    except JoseError as exc:
        if "exp" in str(exc) or getattr(exc, "error", "") == "expired_token":
            raise Unauthorized("access token expired") from exc
        raise Unauthorized(f"invalid access token: {exc}") from exc
    return claims


def _expiry(claims: Mapping[str, Any]) -> datetime | None:
    exp = claims.get("exp")
    return datetime.fromtimestamp(exp, UTC) if isinstance(exp, int | float) else None


async def authenticate(
    session: AsyncSession, token: str, keyring: Keyring
) -> tuple[TenantScope, str | None]:
    """The tenant scope an access token grants, and for an external token
    the project slug its claims name (the caller locks the scope to it); or 401."""
    kid = _header(token).get("kid")
    ours = await keyring.verifying_keys(session, kid=kid if isinstance(kid, str) else None)
    if isinstance(kid, str) and any(k.kid == kid for k in ours):
        return await _ours(session, _decode(token, ours, [ALG])), None
    return await _external(session, token)


async def _ours(session: AsyncSession, claims: Mapping[str, Any]) -> TenantScope:
    try:
        grant_id = uuid.UUID(str(claims.get("gid")))
    except ValueError as exc:
        raise Unauthorized("invalid access token") from exc
    grant = await repo.resolve_grant(session, grant_id)
    if grant is None or grant.revoked:
        raise Unauthorized("access token revoked")
    if grant.tenant_disabled:
        raise Unauthorized("tenant disabled")
    return mint_tenant(
        tenant_id=grant.tenant_id,
        key_id=None,
        credential=f"grant:{grant_id}",
        permissions=frozenset(grant.scopes),
        project_lock=grant.project_id,
        tag_terms=grant.tag_scope,
        expires_at=_expiry(claims),
    )


def _audiences(claims: Mapping[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list):
        return [a for a in aud if isinstance(a, str)]
    return []


async def _external(session: AsyncSession, token: str) -> tuple[TenantScope, str]:
    unverified = _unverified_claims(token)
    issuer, audiences = unverified.get("iss"), _audiences(unverified)
    if not isinstance(issuer, str) or not audiences:
        raise Unauthorized("invalid access token: unknown signing key")
    trusted = await repo.resolve_issuer(session, issuer, audiences)
    if trusted is None:
        raise Unauthorized(
            "access token signed by an unknown key or from an issuer no tenant trusts"
        )
    try:
        keys = KeySet.import_key_set(trusted.jwks)  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError) as exc:
        raise Unauthorized("the trusted issuer's JWKS cannot be read") from exc
    claims = _decode(token, keys, EXTERNAL_ALGS)
    if claims.get("iss") != trusted.issuer or trusted.audience not in _audiences(claims):
        raise Unauthorized("invalid access token: issuer or audience mismatch")
    return external_scope(trusted, claims), project_claim(trusted, claims)


def _claim_scopes(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return raw.split()
    if isinstance(raw, list):
        return [s for s in raw if isinstance(s, str)]
    return []


def external_scope(trusted: OAuthIssuer, claims: Mapping[str, Any]) -> TenantScope:
    """Map a verified external token's claims to keepmem's scope: scopes from
    the scope claim (those keepmem knows) or the issuer's defaults, tag scope
    from the mapped claims (a missing claim refuses the token)."""
    permissions = [s for s in _claim_scopes(claims.get(trusted.scope_claim)) if s in ALL_SCOPES]
    if not permissions:
        permissions = list(trusted.default_scopes)
    terms: list[str] = []
    for tag_key, claim in trusted.tag_claims.items():
        value = claims.get(claim)
        if not isinstance(value, str | int) or str(value).strip() == "":
            raise Unauthorized(f"access token lacks the '{claim}' claim its issuer maps to a tag")
        terms.extend(tagrules.scope_terms({tag_key: str(value)}))
    subject = str(claims.get("sub", ""))[:200]
    return mint_tenant(
        tenant_id=trusted.tenant_id,
        key_id=None,
        credential=f"oidc:{trusted.id}:{subject}",
        permissions=frozenset(permissions),
        tag_terms=terms,
        expires_at=_expiry(claims),
    )


def project_claim(trusted: OAuthIssuer, claims: Mapping[str, Any]) -> str:
    value = claims.get(trusted.project_claim) if trusted.project_claim else None
    return value if isinstance(value, str) and value else trusted.default_project
