"""Every SQL statement of Runtime metadata and of the schema-owner journal."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.runtime.metadata import models as m


class MetadataRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def active_definitions(self, org_id: str, kind: str) -> list[RowMapping]:
        d, a = m.definition, m.active_definition
        stmt = (
            select(d.c.name, d.c.version, d.c.body, d.c.digest)
            .select_from(
                a.join(
                    d,
                    and_(
                        d.c.org_id == a.c.org_id,
                        d.c.kind == a.c.kind,
                        d.c.name == a.c.name,
                        d.c.version == a.c.version,
                    ),
                )
            )
            .where(a.c.org_id == org_id, a.c.kind == kind)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def latest_versions(self, org_id: str, kind: str) -> dict[str, int]:
        d = m.definition
        stmt = (
            select(d.c.name, func.max(d.c.version).label("version"))
            .where(d.c.org_id == org_id, d.c.kind == kind)
            .group_by(d.c.name)
        )
        return {row.name: int(row.version) for row in await self.session.execute(stmt)}

    async def insert_definition(self, **values: Any) -> None:
        await self.session.execute(insert(m.definition).values(**values))

    async def ensure_org_state(self, org_id: str) -> None:
        exists = await self.session.execute(
            select(m.org_state.c.org_id).where(m.org_state.c.org_id == org_id)
        )
        if exists.first() is None:
            await self.session.execute(
                insert(m.org_state).values(org_id=org_id, schema_generation=0, metadata_revision=0)
            )

    async def org_state(self, org_id: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.org_state).where(m.org_state.c.org_id == org_id)
        )
        return result.mappings().first()

    async def advance_org_state(self, org_id: str, *, schema_changed: bool) -> None:
        s = m.org_state
        values: dict[str, Any] = {"metadata_revision": s.c.metadata_revision + 1}
        if schema_changed:
            values["schema_generation"] = s.c.schema_generation + 1
        await self.session.execute(update(s).where(s.c.org_id == org_id).values(**values))

    async def insert_apply(
        self, *, org_id: str, apply_id: str, definitions: list[list[Any]], now_ms: int
    ) -> None:
        await self.session.execute(
            insert(m.metadata_apply).values(
                org_id=org_id,
                apply_id=apply_id,
                state="staged",
                definitions=json.dumps(definitions),
                created_at_ms=now_ms,
                updated_at_ms=now_ms,
            )
        )

    async def staged_applies(self, org_id: str | None = None) -> list[RowMapping]:
        a = m.metadata_apply
        stmt = select(a).where(a.c.state == "staged").order_by(a.c.created_at_ms)
        if org_id is not None:
            stmt = stmt.where(a.c.org_id == org_id)
        return list((await self.session.execute(stmt)).mappings())

    async def apply(self, org_id: str, apply_id: str) -> RowMapping | None:
        a = m.metadata_apply
        result = await self.session.execute(
            select(a).where(a.c.org_id == org_id, a.c.apply_id == apply_id)
        )
        return result.mappings().first()

    async def finish_apply(
        self, *, org_id: str, apply_id: str, state: str, now_ms: int, error: str | None = None
    ) -> bool:
        """CAS staged -> state; False when another process finished it first."""
        a = m.metadata_apply
        result = await self.session.execute(
            update(a)
            .where(a.c.org_id == org_id, a.c.apply_id == apply_id, a.c.state == "staged")
            .values(state=state, error=error, updated_at_ms=now_ms)
        )
        return int(result.rowcount) == 1  # type: ignore[attr-defined]  # CursorResult

    async def set_active(
        self, *, org_id: str, kind: str, name: str, version: int, now_ms: int
    ) -> None:
        a = m.active_definition
        result = await self.session.execute(
            update(a)
            .where(a.c.org_id == org_id, a.c.kind == kind, a.c.name == name, a.c.version < version)
            .values(version=version, activated_at_ms=now_ms)
        )
        if int(result.rowcount) == 0:  # type: ignore[attr-defined]  # CursorResult
            exists = await self.session.execute(
                select(a.c.version).where(a.c.org_id == org_id, a.c.kind == kind, a.c.name == name)
            )
            if exists.first() is None:
                await self.session.execute(
                    insert(a).values(
                        org_id=org_id, kind=kind, name=name, version=version, activated_at_ms=now_ms
                    )
                )

    # ------------------------------------------------------------------ schema journal
    async def insert_operation(self, **values: Any) -> None:
        await self.session.execute(insert(m.schema_operation).values(**values))

    async def operations(self, org_id: str, apply_id: str) -> list[RowMapping]:
        o = m.schema_operation
        result = await self.session.execute(
            select(o)
            .where(o.c.org_id == org_id, o.c.apply_id == apply_id)
            .order_by(o.c.created_at_ms, o.c.operation_id)
        )
        return list(result.mappings())

    async def finish_operation(
        self,
        *,
        org_id: str,
        operation_id: str,
        state: str,
        actual_fingerprint: str | None,
        now_ms: int,
        error: str | None = None,
    ) -> None:
        o = m.schema_operation
        await self.session.execute(
            update(o)
            .where(o.c.org_id == org_id, o.c.operation_id == operation_id)
            .values(
                state=state,
                actual_fingerprint=actual_fingerprint,
                attempts=o.c.attempts + 1,
                applied_at_ms=now_ms if state == "applied" else None,
                error=error,
            )
        )
