"""Per-key rate limit on real Redis: 429 with Retry-After, other keys unaffected."""

from __future__ import annotations

import httpx

from app.main import create_app


async def test_over_the_limit_is_429_per_key(settings, db, make_tenant) -> None:
    limited = settings.model_copy(update={"rate_limit_per_minute": 3})
    app = create_app(limited, db=db)
    a, b = await make_tenant(), await make_tenant()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            codes = [(await c.get("/v1/notes", headers=a.headers)).status_code for _ in range(8)]
            assert codes[:3] == [200, 200, 200]
            # at most two windows' worth pass even if a minute boundary falls in between
            assert 429 in codes and codes.count(200) <= 6
            r = await c.get("/v1/notes", headers=a.headers)
            assert r.status_code == 429
            assert r.json()["code"] == "rate_limited"
            assert 1 <= int(r.headers["retry-after"]) <= 60
            assert (await c.get("/v1/notes", headers=b.headers)).status_code == 200
