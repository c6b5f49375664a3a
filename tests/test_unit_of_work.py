"""A failed commit is a 5xx, never a false 2xx, and leaves nothing behind."""

from __future__ import annotations

import httpx
from sqlalchemy import text

from app.deps import SessionDep, WriteScope
from app.main import create_app
from tests.conftest import Tenant


async def test_failed_commit_is_500_and_nothing_is_kept(settings, db, tenant: Tenant) -> None:
    app = create_app(settings, db=db)

    @app.post("/v1/test-commit-failure")
    async def boom(scope: WriteScope, session: SessionDep) -> dict[str, bool]:
        """Writes a note, then sets up a deferred constraint that fails at commit."""
        from app.notes import service
        from app.notes.service import Limits, PutInput

        await service.put(
            session, scope, data=PutInput(content="doomed", id="doomed"), limits=Limits()
        )
        await session.execute(text("CREATE TEMP TABLE p (id int PRIMARY KEY) ON COMMIT DROP"))
        await session.execute(
            text(
                "CREATE TEMP TABLE c (pid int REFERENCES p DEFERRABLE INITIALLY DEFERRED) "
                "ON COMMIT DROP"
            )
        )
        await session.execute(text("INSERT INTO c VALUES (1)"))
        return {"ok": True}

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            r = await c.post("/v1/test-commit-failure", headers=tenant.headers)
            assert r.status_code == 500, (r.headers, r.text)
            assert r.json()["code"] == "internal_error" and r.json()["request_id"]
            r = await c.get("/v1/notes/doomed", headers=tenant.headers)
            assert r.status_code == 404
