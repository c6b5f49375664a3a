"""OAuth: running authlib for a request, the consent step, and a tenant's
own OAuth administration (service accounts, trusted issuers)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from authlib.common.security import is_secure_transport
from authlib.oauth2.rfc6749.errors import OAuth2Error
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.accounts import service as accounts
from app.audit import repository as audit
from app.auth import service as auth_service
from app.errors import BadRequest, Conflict, Forbidden, InvalidTarget, NotFound
from app.kit import tags as tagrules
from app.kit.tags import InvalidTags
from app.models import OAuthClient, OAuthIssuer
from app.oauth import registration, resource
from app.oauth import repository as repo
from app.oauth.adapters import Answer, Client, Consent, Incoming, hash_secret
from app.oauth.keyring import Keyring
from app.oauth.server import Server
from app.settings import Settings
from app.tenancy import ADMIN, ALL_SCOPES, Scope, TenantScope
from app.tenants import service as tenants_service

MAX_ISSUERS_PER_TENANT = 20
MAX_CLIENTS_PER_TENANT = 100


def issuer_of(settings: Settings, base_url: str) -> str:
    """The issuer (and the base of every OAuth URL): the configured public
    URL, else the request's own base URL."""
    return resource.issuer_of(settings.public_url, base_url)


@dataclass(slots=True)
class OAuthContext:
    session: AsyncSession
    settings: Settings
    keyring: Keyring
    server_secret: str
    issuer: str

    def server(self) -> Server:
        return Server(
            self.session,
            issuer=self.issuer,
            keyring=self.keyring,
            server_secret=self.server_secret,
            access_seconds=self.settings.oauth_access_token_seconds,
            refresh_days=self.settings.oauth_refresh_token_days,
            registration_open=self.settings.oauth_registration,
            max_unused_clients=self.settings.oauth_max_unused_clients,
        )

    @property
    def resources(self) -> frozenset[str]:
        """This server's resource URLs: the only audiences its tokens name."""
        return resource.resources_of(self.issuer)

    def foreign_target(self, requested: Sequence[str]) -> str | None:
        """An RFC 8707 ``resource`` of the request that is not this server
        (keepmem mints tokens for itself alone), or None."""
        return next((r for r in requested if not resource.is_ours(r, self.resources)), None)

    def invalid_target(self, requested: str) -> str:
        return registration.error_text(
            f"resource {requested[:200]} is not this server: keepmem issues tokens only for "
            f"{self.issuer} and {self.issuer}{resource.MCP_PATH}"
        )


INSECURE = (
    "OAuth needs https (or a loopback address): serve keepmem over TLS and set "
    "KEEPMEM_PUBLIC_URL to the https URL clients use"
)


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 §2: the requested resource is not one this server issues tokens for."""

    error = "invalid_target"


def refusal(error: OAuth2Error) -> Answer:
    """An OAuth error answered before authlib runs, in the RFC 6749 §5.2 shape."""
    status, body, headers = error()
    return Answer(status=status, body=dict(body), headers=list(headers))


async def token(ctx: OAuthContext, incoming: Incoming) -> Answer:
    """The token endpoint: a ``resource`` naming another server is
    ``invalid_target`` (RFC 8707 §2); otherwise authlib's grants answer."""
    requested = [*incoming.form.get("resource", []), *incoming.args.get("resource", [])]
    foreign = ctx.foreign_target(requested)
    if foreign is not None:
        return refusal(InvalidTargetError(ctx.invalid_target(foreign)))
    return await run(ctx, lambda server: server.create_token_response(incoming))


async def register(ctx: OAuthContext, incoming: Incoming, body: Any) -> Answer:
    """Dynamic client registration (RFC 7591): the metadata checked
    (:mod:`app.oauth.registration`) before authlib stores the client."""
    try:
        metadata = registration.check(body)
    except OAuth2Error as error:
        return refusal(error)
    incoming.json = metadata
    return await run(
        ctx, lambda server: server.create_endpoint_response("client_registration", incoming)
    )


async def run(ctx: OAuthContext, act: Callable[[Server], Answer]) -> Answer:
    """Run one authlib exchange (token, revocation, introspection,
    registration) in a worker thread, its storage on this session."""
    if not is_secure_transport(ctx.issuer):
        body = {"error": "insecure_transport", "error_description": INSECURE}
        return Answer(status=400, body=body, headers=[("Cache-Control", "no-store")])
    await tenancy.bind_oauth(ctx.session)
    server = ctx.server()
    answer = await anyio.to_thread.run_sync(act, server)
    for event in server.events:  # tokens issued or revoked: in their tenant's trail
        tenant = auth_service.oauth_client_tenant(event.tenant_id, event.client_id)
        await tenancy.bind(ctx.session, tenant)
        await audit.record(
            ctx.session,
            tenant,
            actor=tenant.actor,
            action=event.action,
            target=f"grant:{event.grant_id}",
            detail=event.detail,
        )
    return answer


# -- the consent step ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsentRequest:
    client_name: str
    client_id: str
    redirect_uri: str
    scopes: list[str]


async def consent_request(ctx: OAuthContext, incoming: Incoming) -> ConsentRequest:
    """Check an authorization request before showing the consent page; a bad
    one is a 400 that names the problem (never a redirect to an unchecked URI)."""
    if not is_secure_transport(ctx.issuer):
        raise BadRequest(INSECURE)
    method = incoming.args.get("code_challenge_method", ["S256"])
    if method != ["S256"] or len(incoming.args.get("code_challenge", [])) != 1:
        raise BadRequest("PKCE is required: send code_challenge with code_challenge_method=S256")
    foreign = ctx.foreign_target(incoming.args.get("resource", []))
    if foreign is not None:
        raise InvalidTarget(f"invalid_target: {ctx.invalid_target(foreign)}")
    await tenancy.bind_oauth(ctx.session)
    server = ctx.server()

    def check(server: Server) -> ConsentRequest:
        try:
            grant = server.get_consent_grant(incoming)
        except OAuth2Error as exc:
            raise BadRequest(
                f"authorization request refused: {exc.error}: {exc.description}"
            ) from exc
        client: Client = grant.client
        requested = (grant.request.payload.scope or " ".join(ALL_SCOPES)).split()
        return ConsentRequest(
            client_name=str(client.row.client_metadata.get("client_name") or client.client_id),
            client_id=client.client_id,
            redirect_uri=grant.redirect_uri,
            scopes=[s for s in ALL_SCOPES if s in requested],
        )

    return await anyio.to_thread.run_sync(check, server)


@dataclass(frozen=True, slots=True)
class ConsentForm:
    api_key: str
    project: str
    scopes: list[str]
    tags: str
    allow: bool


def parse_tag_lines(raw: str) -> list[str]:
    """``key=value`` per line or comma-separated, as a credential's tag scope."""
    pairs: dict[str, str] = {}
    for item in raw.replace(",", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise BadRequest(f"tag scope {item!r}: write key=value")
        pairs[key.strip()] = value.strip()
    try:
        return tagrules.scope_terms(pairs)
    except InvalidTags as exc:
        raise BadRequest(str(exc)) from exc


async def consent_submit(ctx: OAuthContext, incoming: Incoming, form: ConsentForm) -> Answer:
    """The person signed in with an API key and chose project, scopes and an
    optional tag scope: issue the code (or the refusal) to the client."""
    request = await consent_request(ctx, incoming)
    tenant = (
        await auth_service.resolve_credential(
            ctx.session, presented=form.api_key, server_secret=ctx.server_secret, verifier=None
        )
    ).tenant
    await tenancy.bind(ctx.session, tenant)
    consent: Consent | None = None
    if form.allow:
        consent = await _consent(
            ctx.session,
            tenant,
            request,
            form,
            max_projects=ctx.settings.max_projects_per_tenant,
        )
    await audit.record(
        ctx.session,
        tenant,
        actor=tenant.actor,
        action="oauth.consent" if consent else "oauth.deny",
        target=request.client_id,
        detail={"scopes": list(consent.scopes) if consent else []},
    )

    def answer(server: Server) -> Answer:
        grant = server.get_consent_grant(incoming, end_user=consent)
        answer: Answer = server.create_authorization_response(
            incoming, grant_user=consent, grant=grant
        )
        return answer

    return await anyio.to_thread.run_sync(answer, ctx.server())


async def _consent(
    session: AsyncSession,
    tenant: TenantScope,
    request: ConsentRequest,
    form: ConsentForm,
    *,
    max_projects: int,
) -> Consent:
    scopes = [s for s in request.scopes if s in form.scopes and s in tenant.permissions]
    if not scopes:
        raise Forbidden("choose at least one scope this API key holds")
    terms = sorted({*tenant.tag_terms, *parse_tag_lines(form.tags)})
    slug = form.project.strip() or tenants_service.DEFAULT_PROJECT
    # The project is made on first use as for the X-Project header: by a key
    # that may make projects (and a grant that will not be tag-scoped), under
    # the tenant's cap (403 project_limit).
    project, _ = await accounts.resolve_project_created(
        session,
        tenant,
        slug=slug,
        may_create=tenants_service.may_create_projects(tenant) and not terms,
        max_projects=max_projects,
    )
    tenants_service.check_lock(tenant, project.id, slug)
    return Consent(
        tenant_id=tenant.tenant_id,
        key_id=tenant.key_id,
        project_id=project.id,
        scopes=tuple(scopes),
        tag_scope=tuple(terms),
    )


# -- service accounts (client credentials) ------------------------------------------


@dataclass(slots=True)
class NewClient:
    row: OAuthClient
    secret: str


async def create_service_account(
    session: AsyncSession,
    scope: Scope,
    *,
    name: str,
    project: str,
    scopes: Sequence[str],
    tags: dict[str, str],
    server_secret: str,
) -> NewClient:
    """A client-credentials client of the caller's tenant, locked to one
    project, scopes and tag scope, none wider than the caller's own."""
    permissions = _narrower_scopes(scope, scopes)
    terms = _narrower_terms(scope, tags)
    if len(await repo.list_clients(session, scope)) >= MAX_CLIENTS_PER_TENANT:
        raise Forbidden(f"a tenant may have at most {MAX_CLIENTS_PER_TENANT} OAuth clients")
    target, _ = await accounts.resolve_project_created(
        session, scope, slug=project, may_create=False, max_projects=None
    )
    if scope.project_lock is not None and target.id != scope.project_lock:
        raise Forbidden("this credential is restricted to another project")
    secret = secrets.token_urlsafe(32)
    row = await repo.insert_client(
        session,
        OAuthClient(
            client_id="svc_" + secrets.token_urlsafe(18),
            tenant_id=scope.tenant_id,
            secret_hash=hash_secret(server_secret, secret),
            client_metadata={
                "client_name": name,
                "grant_types": ["client_credentials"],
                "token_endpoint_auth_method": "client_secret_basic",
            },
            project_id=target.id,
            scopes=permissions,
            tag_scope=terms,
        ),
    )
    await audit.record(
        session,
        scope,
        actor=scope.actor,
        action="oauth.client.create",
        target=row.client_id,
        detail={"scopes": permissions, "project": project},
    )
    return NewClient(row=row, secret=secret)


def _narrower_scopes(scope: TenantScope, wanted: Sequence[str]) -> list[str]:
    chosen = sorted(set(wanted))
    if not chosen or any(s not in ALL_SCOPES for s in chosen):
        raise BadRequest(f"scopes must be a non-empty subset of {list(ALL_SCOPES)}")
    wider = [s for s in chosen if s not in scope.permissions]
    if wider:
        raise Forbidden(f"a credential cannot grant scopes it lacks: {wider}")
    return chosen


def _narrower_terms(scope: TenantScope, tags: dict[str, str]) -> list[str]:
    try:
        terms = tagrules.scope_terms(tags)
    except InvalidTags as exc:
        raise BadRequest(str(exc)) from exc
    return sorted({*scope.tag_terms, *terms})


async def list_service_accounts(session: AsyncSession, scope: Scope) -> Sequence[OAuthClient]:
    return await repo.list_clients(session, scope)


async def revoke_service_account(
    session: AsyncSession, scope: Scope, *, client_id: str
) -> OAuthClient:
    row = await repo.revoke_client(session, scope, client_id)
    if row is None:
        raise NotFound(f"OAuth client not found: {client_id}")
    await audit.record(
        session, scope, actor=scope.actor, action="oauth.client.revoke", target=client_id
    )
    return row


# -- trusted external issuers -------------------------------------------------------


async def add_issuer(session: AsyncSession, scope: Scope, *, fields: dict[str, Any]) -> OAuthIssuer:
    """Trust an OpenID Connect issuer's tokens for this tenant."""
    if ADMIN not in scope.permissions or scope.tag_terms or scope.project_lock:
        raise Forbidden("only an unrestricted admin credential may trust an issuer")
    try:
        KeySet.import_key_set(fields["jwks"])
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise BadRequest(f"jwks is not a JSON Web Key Set: {exc}") from exc
    for tag_key in fields.get("tag_claims", {}):
        try:
            tagrules.validate_key(tag_key)
        except InvalidTags as exc:
            raise BadRequest(str(exc)) from exc
    if any(s not in ALL_SCOPES for s in fields.get("default_scopes", [])):
        raise BadRequest(f"default_scopes must be a subset of {list(ALL_SCOPES)}")
    trusted = await repo.list_issuers(session, scope)
    # Unique per tenant (another tenant may trust the same pair: its tokens
    # then name their tenant, see app.oauth.tokens); nothing here says
    # whether another tenant does.
    duplicate = Conflict(
        "this tenant already trusts this issuer and audience: remove that entry "
        "(DELETE /v1/oauth/issuers/{id}) to change it"
    )
    if any(t.issuer == fields["issuer"] and t.audience == fields["audience"] for t in trusted):
        raise duplicate
    if len(trusted) >= MAX_ISSUERS_PER_TENANT:
        raise Forbidden(f"a tenant may trust at most {MAX_ISSUERS_PER_TENANT} issuers")
    try:
        async with session.begin_nested():
            row = await repo.insert_issuer(
                session, OAuthIssuer(tenant_id=scope.tenant_id, **fields)
            )
    except IntegrityError as exc:  # the same pair added at the same moment
        raise duplicate from exc
    await audit.record(
        session,
        scope,
        actor=scope.actor,
        action="oauth.issuer.add",
        target=str(row.id),
        detail={"issuer": row.issuer, "audience": row.audience},
    )
    return row


async def list_issuers(session: AsyncSession, scope: Scope) -> Sequence[OAuthIssuer]:
    return await repo.list_issuers(session, scope)


async def remove_issuer(session: AsyncSession, scope: Scope, *, issuer_id: uuid.UUID) -> None:
    if not await repo.delete_issuer(session, scope, issuer_id):
        raise NotFound(f"issuer not found: {issuer_id}")
    await audit.record(
        session, scope, actor=scope.actor, action="oauth.issuer.remove", target=str(issuer_id)
    )


async def erase_project(
    session: AsyncSession, tenant: TenantScope, *, project_id: uuid.UUID
) -> None:
    """Erase the grants, codes and service accounts of a project (its erasure)."""
    await repo.delete_of_project(session, tenant, project_id)
