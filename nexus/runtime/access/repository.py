"""Every SQL statement of permission-set assignments."""

from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.runtime.access import models as m

_assignment = m.permission_assignment


class PermissionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def permission_sets(self, org_id: str, user_id: str) -> set[str]:
        """The (lower-case) names of the permission sets assigned to one user."""
        result = await self.session.execute(
            select(_assignment.c.permission_set).where(
                _assignment.c.org_id == org_id, _assignment.c.user_id == user_id
            )
        )
        return {str(name).lower() for name in result.scalars()}

    async def assignments(self, org_id: str) -> dict[str, list[str]]:
        """Every user's assigned permission sets, by user id."""
        held: dict[str, list[str]] = {}
        result = await self.session.execute(
            select(_assignment.c.user_id, _assignment.c.permission_set).where(
                _assignment.c.org_id == org_id
            )
        )
        for row in result:
            held.setdefault(row.user_id, []).append(row.permission_set)
        return held

    async def assign(self, *, org_id: str, user_id: str, permission_set: str, now_ms: int) -> bool:
        """Assign one set (its lower-case name); False when it was assigned already."""
        if permission_set in await self.permission_sets(org_id, user_id):
            return False
        await self.session.execute(
            insert(_assignment).values(
                org_id=org_id, user_id=user_id, permission_set=permission_set, assigned_at_ms=now_ms
            )
        )
        return True

    async def remove(self, *, org_id: str, user_id: str, permission_set: str) -> bool:
        """Remove one set (its lower-case name); False when it was not assigned."""
        result = await self.session.execute(
            delete(_assignment).where(
                _assignment.c.org_id == org_id,
                _assignment.c.user_id == user_id,
                _assignment.c.permission_set == permission_set,
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]  # CursorResult
