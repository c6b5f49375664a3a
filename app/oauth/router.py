"""OAuth 2.1 endpoints (the MCP authorization specification's set) and a
tenant's OAuth administration.

* discovery: ``/.well-known/oauth-authorization-server`` (RFC 8414),
  ``/.well-known/oauth-protected-resource[/mcp]`` (RFC 9728), ``/oauth/jwks``
* the flow: ``/oauth/authorize`` (the consent page), ``/oauth/token``,
  ``/oauth/register`` (RFC 7591), ``/oauth/revoke`` (RFC 7009),
  ``/oauth/introspect`` (RFC 7662)
* administration (admin scope): ``/v1/oauth/clients`` (service accounts for
  the client-credentials grant), ``/v1/oauth/issuers`` (trusted OpenID
  Connect issuers)
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from authlib.oauth2.rfc6749.errors import OAuth2Error
from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from app import ratelimit
from app.deps import AdminScope, SessionDep, SettingsDep, server_secret
from app.errors import AppError, NotConfigured, PayloadTooLarge
from app.oauth import pages, registration, service
from app.oauth.adapters import Answer, Incoming
from app.oauth.keyring import Keyring
from app.oauth.resource import MCP_PATH
from app.oauth.schemas import (
    ClientCreate,
    ClientCreated,
    ClientList,
    ClientMetadata,
    ClientOut,
    IssuerCreate,
    IssuerList,
    IssuerOut,
    OAuthErrorOut,
)
from app.wire import RefusedInput, api_router, loads

router = api_router(tags=["oauth"])
# The OAuth protocol endpoints answer errors as RFC 6749 §5.2 says.
protocol = api_router(
    tags=["oauth"],
    responses={
        400: {"model": OAuthErrorOut, "description": "The request is refused (RFC 6749 §5.2)."},
        401: {"model": OAuthErrorOut, "description": "The client did not authenticate."},
    },
)


def _keyring(request: Request) -> Keyring:
    keyring: Keyring | None = getattr(request.app.state, "keyring", None)
    if keyring is None:
        raise NotConfigured("OAuth needs the server secret (KEEPMEM_SECRET_KEY)")
    return keyring


async def oauth_context(
    request: Request, session: SessionDep, settings: SettingsDep
) -> service.OAuthContext:
    return service.OAuthContext(
        session=session,
        settings=settings,
        keyring=_keyring(request),
        server_secret=server_secret(settings),
        issuer=service.issuer_of(settings, str(request.base_url)),
    )


Context = Annotated[service.OAuthContext, Depends(oauth_context)]


async def _incoming(request: Request, *, with_form: bool = True) -> Incoming:
    form: dict[str, list[str]] = {}
    if with_form and request.method == "POST":
        data = await request.form()
        for key in data:
            form[key] = [v for v in data.getlist(key) if isinstance(v, str)]
    args: dict[str, list[str]] = {}
    for key in request.query_params:
        args[key] = request.query_params.getlist(key)
    return Incoming(
        method=request.method,
        url=str(request.url),
        headers=request.headers,
        args=args,
        form=form,
    )


def _response(answer: Answer) -> Response:
    headers = dict(answer.headers)
    if isinstance(answer.body, dict | list):
        return JSONResponse(answer.body, status_code=answer.status, headers=headers)
    return Response(answer.body or b"", status_code=answer.status, headers=headers)


# -- discovery ----------------------------------------------------------------------


@router.get("/.well-known/oauth-authorization-server", summary="Authorization server metadata")
async def server_metadata(ctx: Context) -> dict[str, Any]:
    """RFC 8414 metadata: endpoints, grants, PKCE method, scopes."""
    return ctx.server().metadata()


def _resource_metadata(ctx: service.OAuthContext, resource: str) -> dict[str, Any]:
    return {
        "resource": resource,
        "authorization_servers": [ctx.issuer],
        "scopes_supported": ["read", "write", "admin"],
        "bearer_methods_supported": ["header"],
        "resource_name": "keepmem",
    }


@router.get("/.well-known/oauth-protected-resource", summary="Protected resource metadata")
async def resource_metadata(ctx: Context) -> dict[str, Any]:
    """RFC 9728 metadata of the REST API."""
    return _resource_metadata(ctx, ctx.issuer)


@router.get(
    "/.well-known/oauth-protected-resource/mcp", summary="Protected resource metadata of /mcp"
)
async def mcp_resource_metadata(ctx: Context) -> dict[str, Any]:
    """RFC 9728 metadata of the MCP endpoint (what an MCP client reads after a 401)."""
    return _resource_metadata(ctx, ctx.issuer + MCP_PATH)


@router.get("/oauth/jwks", summary="Token-signing keys (JWKS)")
async def jwks(ctx: Context) -> dict[str, Any]:
    """The public keys access tokens are signed with, by ``kid``."""
    return await ctx.keyring.jwks(ctx.session)


# -- the flow -----------------------------------------------------------------------


# The consent page is for people (HTML), not part of the JSON API.
@router.get("/oauth/authorize", response_class=HTMLResponse, include_in_schema=False)
async def authorize_page(request: Request, ctx: Context) -> Response:
    """Sign in with an API key of the tenant and choose project and scopes."""
    incoming = await _incoming(request, with_form=False)
    try:
        asked = await service.consent_request(ctx, incoming)
    except AppError as exc:
        return pages.error(exc)
    return pages.consent(asked, incoming.args)


@router.post("/oauth/authorize", response_class=HTMLResponse, include_in_schema=False)
async def authorize(request: Request, ctx: Context) -> Response:
    """The consent form's answer: a redirect to the client with a code (or a refusal)."""
    incoming = await _incoming(request)
    fields = {k: v for k, v in incoming.form.items()}
    oauth_fields = {k: v for k, v in fields.items() if k not in pages.CONSENT_FIELDS}
    form = service.ConsentForm(
        api_key=(fields.get("api_key") or [""])[0].strip(),
        project=(fields.get("project") or [""])[0],
        scopes=fields.get("scopes", []),
        tags=(fields.get("tags") or [""])[0],
        allow=(fields.get("decision") or [""])[0] == "allow",
    )
    incoming = Incoming(
        method="POST", url=incoming.url, headers=incoming.headers, args=oauth_fields, form={}
    )
    try:
        answer = await service.consent_submit(ctx, incoming, form)
    except AppError as exc:
        return pages.error(exc)
    return _response(answer)


@protocol.post("/oauth/token", summary="Token endpoint")
async def token(request: Request, ctx: Context) -> Response:
    """Authorization code (with PKCE), refresh token and client credentials grants."""
    incoming = await _incoming(request)
    answer = await service.token(ctx, incoming)
    if answer.status in (400, 401):
        await ratelimit.count_failure(
            request.app.state.redis,
            address=request.client.host if request.client else "unknown",
            failures_per_minute=ctx.settings.auth_failures_per_minute,
        )
    return _response(answer)


@protocol.post("/oauth/revoke", summary="Revoke a token (RFC 7009)")
async def revoke(request: Request, ctx: Context) -> Response:
    """Revoking an access or refresh token revokes its whole grant."""
    incoming = await _incoming(request)
    return _response(
        await service.run(
            ctx, lambda server: server.create_endpoint_response("revocation", incoming)
        )
    )


@protocol.post("/oauth/introspect", summary="Introspect a token (RFC 7662)")
async def introspect(request: Request, ctx: Context) -> Response:
    """Whether a token is active, for the client it was issued to."""
    incoming = await _incoming(request)
    return _response(
        await service.run(
            ctx, lambda server: server.create_endpoint_response("introspection", incoming)
        )
    )


async def registration_body(request: Request, settings: SettingsDep) -> bytes:
    """A registration's body, read after the address's rate limit and at
    most :data:`registration.MAX_BODY_BYTES` of it (before any database work)."""
    await ratelimit.count_registration(
        request.app.state.redis,
        address=request.client.host if request.client else "unknown",
        per_minute=settings.oauth_registrations_per_minute,
    )
    limit = registration.MAX_BODY_BYTES
    too_large = PayloadTooLarge(f"a registration request is at most {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return body


def registration_json(raw: bytes) -> Any:
    """The registration's JSON, through the service's one decoder
    (:func:`app.wire.loads`: strict, depth-limited); what it refuses, or
    what is no JSON, is ``invalid_client_metadata``."""
    try:
        return loads(raw) if raw.strip() else {}
    except RefusedInput as exc:
        raise registration.unreadable(str(exc.detail)) from None
    except ValueError as exc:  # malformed JSON, or bytes that are not UTF-8
        raise registration.unreadable(f"not JSON ({str(exc)[:100]})") from None


_REGISTRATION_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": ClientMetadata.model_json_schema()}},
    }
}


@protocol.post(
    "/oauth/register",
    status_code=201,
    summary="Register a client (RFC 7591)",
    openapi_extra=_REGISTRATION_DOC,
)
async def register(
    request: Request, raw: Annotated[bytes, Depends(registration_body)], ctx: Context
) -> Response:
    """Dynamic client registration for MCP clients (authorization code only).

    Open to anyone, so bounded: at most 64 KiB (413), every member of its
    type and length, redirect URIs https (http only on a loopback address)
    without fragment; refusals are 400 ``invalid_client_metadata`` or
    ``invalid_redirect_uri`` (RFC 7591 §3.2.2). Registrations per minute per
    address are limited (429). Clients that never complete a grant are kept
    up to a cap, the oldest deleted to make room."""
    try:
        body = registration_json(raw)
    except OAuth2Error as error:
        return _response(service.refusal(error))
    incoming = Incoming(method="POST", url=str(request.url), headers=request.headers)
    return _response(await service.register(ctx, incoming, body))


# -- administration -----------------------------------------------------------------


@router.post(
    "/v1/oauth/clients", response_model=ClientCreated, status_code=201, summary="Service account"
)
async def create_client(
    body: ClientCreate, scope: AdminScope, session: SessionDep, settings: SettingsDep
) -> ClientCreated:
    """A client for the client-credentials grant, locked to one project,
    scopes and tag scope. The secret is in this response only."""
    new = await service.create_service_account(
        session,
        scope,
        name=body.name,
        project=body.project or scope.project_slug,
        scopes=body.scopes,
        tags=body.tags,
        server_secret=server_secret(settings),
    )
    return ClientCreated(
        **ClientOut.of(new.row, body.project or scope.project_slug).model_dump(),
        client_secret=new.secret,
    )


@router.get("/v1/oauth/clients", response_model=ClientList, summary="List service accounts")
async def list_clients(scope: AdminScope, session: SessionDep) -> ClientList:
    """The tenant's service accounts (never their secrets)."""
    rows = await service.list_service_accounts(session, scope)
    return ClientList(clients=[ClientOut.of(r) for r in rows])


@router.delete(
    "/v1/oauth/clients/{client_id}", response_model=ClientOut, summary="Revoke a service account"
)
async def revoke_client(client_id: str, scope: AdminScope, session: SessionDep) -> ClientOut:
    """Revoke a service account: its tokens stop working at once."""
    return ClientOut.of(await service.revoke_service_account(session, scope, client_id=client_id))


@router.post(
    "/v1/oauth/issuers", response_model=IssuerOut, status_code=201, summary="Trust an issuer"
)
async def add_issuer(body: IssuerCreate, scope: AdminScope, session: SessionDep) -> IssuerOut:
    """Accept access tokens from an OpenID Connect issuer (verified with its
    JWKS, carrying ``audience`` in ``aud``), mapping claims to project,
    scopes and tag scope. The pair is unique per tenant (409 when this
    tenant already trusts it); when several tenants trust one, tokens name
    theirs with the ``X-Keepmem-Tenant`` header."""
    return IssuerOut.of(await service.add_issuer(session, scope, fields=body.model_dump()))


@router.get("/v1/oauth/issuers", response_model=IssuerList, summary="List trusted issuers")
async def list_issuers(scope: AdminScope, session: SessionDep) -> IssuerList:
    """The OpenID Connect issuers this tenant trusts, with their claim mappings."""
    rows = await service.list_issuers(session, scope)
    return IssuerList(issuers=[IssuerOut.of(r) for r in rows])


@router.delete("/v1/oauth/issuers/{issuer_id}", status_code=204, summary="Stop trusting an issuer")
async def remove_issuer(issuer_id: uuid.UUID, scope: AdminScope, session: SessionDep) -> Response:
    """Stop accepting this issuer's tokens (at once)."""
    await service.remove_issuer(session, scope, issuer_id=issuer_id)
    return Response(status_code=204)
