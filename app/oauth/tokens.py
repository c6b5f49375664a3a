"""Access tokens presented to the API: keepmem's own (signed by the keyring,
naming their grant) or an external OpenID Connect issuer's that a tenant
trusts. Both resolve to the same ``TenantScope`` an API key does.

Every token's audience is checked in one place (:func:`check_audience`):
keepmem's own must name this server's resource (:mod:`app.oauth.resource`),
an external issuer's the audience the tenant registered for it.

When more than one tenant trusts an external token's issuer and audience, the
request names its tenant (``X-Keepmem-Tenant: <tenant id>``).

Every failure is a 401 whose message says what is wrong (expired, revoked,
unknown issuer, bad signature, wrong audience) and nothing about other
tenants: which tenants trust an issuer is said only to a token that verifies.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import Unauthorized
from app.kit import storable
from app.kit import tags as tagrules
from app.models import OAuthIssuer
from app.oauth import repository as repo
from app.oauth import resource
from app.oauth.keyring import ALG, Keyring
from app.tenancy import ALL_SCOPES, TenantScope, mint_tenant

LEEWAY_S = 30
EXTERNAL_ALGS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA"]
TENANT_HEADER = "X-Keepmem-Tenant"
UNKNOWN_ISSUER = "access token signed by an unknown key or from an issuer no tenant trusts"


@dataclass(frozen=True, slots=True)
class Verifier:
    """What a presented access token is checked against: the keyring, this
    server's resource URLs (keepmem's own tokens must name one in ``aud``),
    and the ``X-Keepmem-Tenant`` header, naming the tenant for an external
    issuer several tenants trust (read only for such a token)."""

    keyring: Keyring
    resources: frozenset[str]
    tenant_header: str | None = None

    @classmethod
    def of(cls, keyring: Keyring, issuer: str, tenant_header: str | None = None) -> Verifier:
        """For a request to the server whose issuer (base URL) is ``issuer``."""
        return cls(keyring, resource.resources_of(issuer), tenant_header)


def _named_tenant(header: str | None) -> uuid.UUID | None:
    """The ``X-Keepmem-Tenant`` header's tenant id (None when absent); 401 when it is not one."""
    if header is None or not header.strip():
        return None
    try:
        return uuid.UUID(header.strip())
    except ValueError:
        raise Unauthorized(f"{TENANT_HEADER} must be a tenant id (a UUID)") from None


def looks_like_jwt(presented: str) -> bool:
    return presented.count(".") == 2 and len(presented) < 16_384


def _header(token: str) -> dict[str, Any]:
    try:
        return dict(jws.extract_compact(token.encode()).headers())
    except (JoseError, ValueError, UnicodeError, RecursionError) as exc:
        raise Unauthorized("invalid access token") from exc


def _unverified_claims(token: str) -> dict[str, Any]:
    try:
        payload = jws.extract_compact(token.encode()).payload
        claims = storable.loads(payload)  # depth-limited: a token is untrusted input
    except (JoseError, ValueError, UnicodeError, RecursionError) as exc:
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
    session: AsyncSession, token: str, verifier: Verifier
) -> tuple[TenantScope, str | None]:
    """The tenant scope an access token grants, and for an external token
    the project slug its claims name (the caller locks the scope to it); or 401."""
    kid = _header(token).get("kid")
    ours = await verifier.keyring.verifying_keys(session, kid=kid if isinstance(kid, str) else None)
    if isinstance(kid, str) and any(k.kid == kid for k in ours):
        claims = _decode(token, ours, [ALG])
        check_audience(claims, verifier.resources, ours=True)
        return await _ours(session, claims), None
    return await _external(session, token, _named_tenant(verifier.tenant_header))


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


def check_audience(claims: Mapping[str, Any], accepted: Collection[str], *, ours: bool) -> None:
    """The one audience check of every access token (RFC 9068 §4, RFC 8707):
    ``aud`` names one of ``accepted``. keepmem's own tokens (``ours``) are
    compared as resource URLs (:func:`app.oauth.resource.canonical`), an
    external issuer's exactly as the tenant registered its audience."""
    audiences = _audiences(claims)
    if ours:
        if any(resource.canonical(a) in accepted for a in audiences):
            return
        raise Unauthorized(
            "access token is not for this server: its audience (aud) names another resource"
        )
    if not any(a in accepted for a in audiences):
        raise Unauthorized("invalid access token: issuer or audience mismatch")


def _verified(token: str, trusted: OAuthIssuer) -> dict[str, Any]:
    """The token's claims, verified with the trusted issuer's JWKS; or 401."""
    try:
        keys = KeySet.import_key_set(trusted.jwks)  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError) as exc:
        raise Unauthorized("the trusted issuer's JWKS cannot be read") from exc
    claims = _decode(token, keys, EXTERNAL_ALGS)
    if claims.get("iss") != trusted.issuer:
        raise Unauthorized("invalid access token: issuer or audience mismatch")
    check_audience(claims, {trusted.audience}, ours=False)
    return claims


async def _external(
    session: AsyncSession, token: str, named: uuid.UUID | None
) -> tuple[TenantScope, str]:
    unverified = _unverified_claims(token)
    issuer, audiences = unverified.get("iss"), _audiences(unverified)
    if not isinstance(issuer, str) or not audiences:
        raise Unauthorized("invalid access token: unknown signing key")
    candidates = list(await repo.resolve_issuers(session, issuer, audiences))
    if named is not None:  # a tenant that does not trust the pair reads as one unknown
        candidates = [c for c in candidates if c.tenant_id == named]
    if not candidates:
        raise Unauthorized(UNKNOWN_ISSUER)
    if len(candidates) > 1:
        # Several tenants trust this issuer and audience: the request names
        # its own. Said only to a token one of them would accept.
        failure: Unauthorized | None = None
        for trusted in candidates:
            try:
                _verified(token, trusted)
            except Unauthorized as exc:
                failure = failure or exc
                continue
            raise Unauthorized(
                "more than one tenant trusts this token's issuer and audience: name yours "
                f"with the {TENANT_HEADER} header (its tenant id)"
            )
        assert failure is not None
        raise failure
    trusted = candidates[0]
    claims = _verified(token, trusted)
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
