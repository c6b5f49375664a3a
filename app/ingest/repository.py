"""SQL of ingest: images held for their OCR job."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Blob
from app.tenancy import Scope


async def hold_images(
    session: AsyncSession, scope: Scope, note_id: str, job_id: int, images: Sequence[bytes]
) -> None:
    if images:
        await session.execute(
            insert(Blob),
            [
                {
                    "tenant_id": scope.tenant_id,
                    "project_id": scope.project_id,
                    "note_id": note_id,
                    "job_id": job_id,
                    "seq": i,
                    "data": data,
                }
                for i, data in enumerate(images)
            ],
        )


async def held_images(session: AsyncSession, scope: Scope, job_id: int) -> list[bytes]:
    rows = await session.execute(
        select(Blob.data)
        .where(
            Blob.tenant_id == scope.tenant_id,
            Blob.project_id == scope.project_id,
            Blob.job_id == job_id,
        )
        .order_by(Blob.seq)
    )
    return list(rows.scalars())


async def release_images(session: AsyncSession, scope: Scope, job_id: int) -> None:
    await session.execute(
        delete(Blob).where(
            Blob.tenant_id == scope.tenant_id,
            Blob.project_id == scope.project_id,
            Blob.job_id == job_id,
        )
    )
