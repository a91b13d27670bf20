"""Every SQL statement of the operator audit: who did what to which target, with what result
(never a password, secret or payload)."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from nexus.platform.db.clock import db_now_ms
from nexus.runtime.admin import models as m


class AuditRepository:
    """Audit rows written in the caller's transaction, so they commit with the change."""

    def __init__(self, db: AsyncSession | AsyncConnection) -> None:
        self.db = db

    async def record(
        self, *, org_id: str, actor: str, action: str, target: str, outcome: str = "ok"
    ) -> None:
        await self.db.execute(
            m.operator_audit.insert().values(
                org_id=org_id,
                audit_id=uuid.uuid4().hex,
                at_ms=db_now_ms(),
                actor=actor[:64],
                action=action[:32],
                target=target[:191],
                outcome=outcome,
            )
        )
