"""Permission-set assignments (security-critical: every change advances the SecurityEpoch)."""

from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import NotFound
from nexus.identity.repository import IdentityRepository
from nexus.platform.db import read_db_now_ms
from nexus.runtime.metadata import models as m
from nexus.runtime.metadata.repository import MetadataRepository


async def assign_permission_set(
    session: AsyncSession, *, org_id: str, user_id: str, permission_set: str, assigned: bool = True
) -> None:
    active = {
        r["name"].lower()
        for r in await MetadataRepository(session).active_definitions(org_id, "permission_set")
    }
    if permission_set.lower() not in active:
        raise NotFound(f"no permission set named {permission_set!r}")
    identity = IdentityRepository(session)
    if await identity.user(org_id, user_id) is None:
        raise NotFound("no such user")
    t = m.permission_assignment
    key = (
        t.c.org_id == org_id,
        t.c.user_id == user_id,
        t.c.permission_set == permission_set.lower(),
    )
    exists = (await session.execute(select(t.c.user_id).where(*key))).first() is not None
    if assigned and not exists:
        await session.execute(
            insert(t).values(
                org_id=org_id,
                user_id=user_id,
                permission_set=permission_set.lower(),
                assigned_at_ms=await read_db_now_ms(session),
            )
        )
    elif not assigned and exists:
        await session.execute(delete(t).where(*key))
    else:
        return
    await identity.advance_security_epoch(org_id)
