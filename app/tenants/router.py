"""A tenant's projects: erasure, and the retention of the request's project."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request, Response

from app.deps import AdminScope, AnyScope, SessionDep
from app.erasure import service as erasure
from app.kit.ids import PROJECT_SLUG_PATTERN
from app.retention import service as retention
from app.tenants import service as tenants
from app.tenants.schemas import ProjectList, ProjectOut, Retention
from app.wire import api_router

router = api_router(prefix="/v1", tags=["projects"])


@router.get("/projects", response_model=ProjectList, summary="List the tenant's projects")
async def list_projects(scope: AnyScope, session: SessionDep) -> ProjectList:
    """The projects of the caller's tenant by slug (a credential locked to
    one project sees that one). A project is created on first use by a key
    with the 'write' scope (the `X-Project` header)."""
    rows = await tenants.list_projects(session, scope)
    return ProjectList(projects=[ProjectOut(slug=p.slug, created_at=p.created_at) for p in rows])


@router.delete("/projects/{slug}", status_code=204, summary="Erase a project")
async def erase_project(
    slug: Annotated[str, Path(pattern=PROJECT_SLUG_PATTERN, max_length=63)],
    request: Request,
    scope: AdminScope,
    session: SessionDep,
) -> Response:
    """Erase a project of the caller's tenant: every note, version, part,
    vector, edge, entity, job and feed entry, the keys, OAuth grants and
    service accounts locked to it, and its audit trail; one audit entry
    records the erasure (without content)."""
    await erasure.erase_project(session, scope, slug=slug)
    request.app.state.caches.projects.drop(lambda key: key == (scope.tenant_id, slug))
    return Response(status_code=204)


@router.get("/retention", response_model=Retention, summary="The project's retention")
async def get_retention(scope: AdminScope, session: SessionDep) -> Retention:
    """How long the request's project keeps notes that are not updated."""
    return Retention(days=await retention.retention(session, scope))


@router.put("/retention", response_model=Retention, summary="Set the project's retention")
async def set_retention(body: Retention, scope: AdminScope, session: SessionDep) -> Retention:
    """Notes of the request's project not updated within ``days`` are deleted
    by the sweeper (within minutes); null keeps them forever. A note's own
    ``expires_at`` applies as well."""
    await retention.set_retention(session, scope, days=body.days)
    return Retention(days=body.days)
