"""Every SQL statement of Catalog."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.catalog import models as m
from nexus.platform.db.backend import insert_ignore, upsert
from nexus.platform.db.clock import db_now_ms


class CatalogRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @property
    def _dialect(self) -> str:
        return self.session.get_bind().dialect.name

    # ------------------------------------------------------------------ releases

    async def release(self, app_id: str, version: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.release).where(m.release.c.app_id == app_id, m.release.c.version == version)
        )
        return result.mappings().first()

    async def release_by_digest(self, digest: str) -> RowMapping | None:
        result = await self.session.execute(select(m.release).where(m.release.c.digest == digest))
        return result.mappings().first()

    async def releases(self, app_id: str) -> list[RowMapping]:
        result = await self.session.execute(
            select(m.release.c.app_id, m.release.c.version, m.release.c.digest).where(
                m.release.c.app_id == app_id
            )
        )
        return list(result.mappings())

    async def release_in_use(self, digest: str) -> bool:
        """Was a release committed in any org, or is a job still working on it? (Then its
        version keeps this digest forever; a release only ever refused may be replaced.)"""
        j, s = m.job, m.job_step
        committed = await self.session.execute(
            select(func.count())
            .select_from(s.join(j, and_(s.c.org_id == j.c.org_id, s.c.job_id == j.c.job_id)))
            .where(j.c.digest == digest, s.c.state == "CATALOG_COMMITTED")
        )
        running = await self.session.execute(
            select(func.count())
            .select_from(j)
            .where(j.c.digest == digest, j.c.state.not_in(("ACTIVE", "FAILED")))
        )
        return int(committed.scalar_one()) + int(running.scalar_one()) > 0

    async def delete_release(self, app_id: str, version: str) -> None:
        await self.session.execute(
            delete(m.release).where(m.release.c.app_id == app_id, m.release.c.version == version)
        )

    async def insert_release(
        self, *, app_id: str, version: str, digest: str, body: str, now_ms: int
    ) -> None:
        await self.session.execute(
            insert_ignore(m.release, self._dialect).values(
                app_id=app_id, version=version, digest=digest, body=body, created_at_ms=now_ms
            )
        )

    # ------------------------------------------------------------------ org, lease, pointer

    async def ensure_org(self, org_id: str, now_ms: int) -> None:
        await self.session.execute(
            insert_ignore(m.org, self._dialect).values(
                org_id=org_id,
                catalog_revision=0,
                active_revision=0,
                writer_token=0,
                writer_job=None,
                writer_until_ms=None,
                updated_at_ms=now_ms,
            )
        )

    async def org(self, org_id: str) -> RowMapping | None:
        result = await self.session.execute(select(m.org).where(m.org.c.org_id == org_id))
        return result.mappings().first()

    async def first_org(self) -> RowMapping | None:
        result = await self.session.execute(select(m.org).order_by(m.org.c.org_id).limit(1))
        return result.mappings().first()

    async def acquire_writer(self, *, org_id: str, job_id: str, lease_ms: int) -> bool:
        """Grant the org's writer lease to `job_id` with a new fencing token, when nobody
        holds it or the holder's lease expired (the database clock decides)."""
        o = m.org
        result = await self.session.execute(
            update(o)
            .where(
                o.c.org_id == org_id,
                or_(o.c.writer_job.is_(None), o.c.writer_until_ms < db_now_ms()),
            )
            .values(
                writer_token=o.c.writer_token + 1,
                writer_job=job_id,
                writer_until_ms=db_now_ms() + lease_ms,
                updated_at_ms=db_now_ms(),
            )
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]  # CursorResult

    async def renew_writer(self, *, org_id: str, job_id: str, token: int, lease_ms: int) -> bool:
        """Extend the lease only for the current holder with the current token (fenced)."""
        o = m.org
        result = await self.session.execute(
            update(o)
            .where(o.c.org_id == org_id, o.c.writer_job == job_id, o.c.writer_token == token)
            .values(writer_until_ms=db_now_ms() + lease_ms, updated_at_ms=db_now_ms())
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]  # CursorResult

    async def release_writer(self, *, org_id: str, job_id: str, token: int) -> None:
        o = m.org
        await self.session.execute(
            update(o)
            .where(o.c.org_id == org_id, o.c.writer_job == job_id, o.c.writer_token == token)
            .values(writer_job=None, writer_until_ms=None, updated_at_ms=db_now_ms())
        )

    async def allocate_revision(self, org_id: str) -> int:
        o = m.org
        await self.session.execute(
            update(o)
            .where(o.c.org_id == org_id)
            .values(catalog_revision=o.c.catalog_revision + 1, updated_at_ms=db_now_ms())
        )
        result = await self.session.execute(
            select(o.c.catalog_revision).where(o.c.org_id == org_id)
        )
        return int(result.scalar_one())

    async def advance_active(self, *, org_id: str, revision: int, token: int) -> bool:
        """The active pointer moves forward only, by CAS, only for the current token."""
        o = m.org
        result = await self.session.execute(
            update(o)
            .where(
                o.c.org_id == org_id,
                o.c.active_revision < revision,
                o.c.writer_token == token,
            )
            .values(active_revision=revision, updated_at_ms=db_now_ms())
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]  # CursorResult

    # ------------------------------------------------------------------ jobs and journal

    async def insert_job(self, **values: Any) -> None:
        await self.session.execute(insert(m.job).values(**values))

    async def job(self, org_id: str, job_id: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.job).where(m.job.c.org_id == org_id, m.job.c.job_id == job_id)
        )
        return result.mappings().first()

    async def unfinished_jobs(self, org_id: str | None = None) -> list[RowMapping]:
        stmt = select(m.job).where(m.job.c.state.not_in(("ACTIVE", "FAILED")))
        if org_id is not None:
            stmt = stmt.where(m.job.c.org_id == org_id)
        result = await self.session.execute(stmt.order_by(m.job.c.created_at_ms))
        return list(result.mappings())

    async def recent_jobs(self, org_id: str, limit: int = 20) -> list[RowMapping]:
        result = await self.session.execute(
            select(m.job)
            .where(m.job.c.org_id == org_id)
            .order_by(m.job.c.created_at_ms.desc(), m.job.c.job_id)
            .limit(limit)
        )
        return list(result.mappings())

    async def advance_job(
        self,
        *,
        org_id: str,
        job_id: str,
        from_state: str,
        to_state: str,
        token: int | None,
        detail: str | None = None,
        **values: Any,
    ) -> bool:
        """Move a job on by CAS on its state, and — once it holds a token — only while that
        token is still the org's current one. Journals the new state in the same statement
        batch (the caller's transaction)."""
        j, o = m.job, m.org
        conditions = [j.c.org_id == org_id, j.c.job_id == job_id, j.c.state == from_state]
        if token is not None:
            current = select(o.c.writer_token).where(o.c.org_id == org_id).scalar_subquery()
            conditions += [j.c.fencing_token == token, current == token]
        result = await self.session.execute(
            update(j)
            .where(and_(*conditions))
            .values(state=to_state, updated_at_ms=db_now_ms(), **values)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]  # CursorResult
            return False
        await self.session.execute(
            insert_ignore(m.job_step, self._dialect).values(
                org_id=org_id,
                job_id=job_id,
                state=to_state,
                fencing_token=token,
                detail=detail,
                at_ms=db_now_ms(),
            )
        )
        return True

    async def fail_job(self, *, org_id: str, job_id: str, error: str) -> None:
        await self.session.execute(
            update(m.job)
            .where(m.job.c.org_id == org_id, m.job.c.job_id == job_id)
            .values(state="FAILED", error=error[:1000], updated_at_ms=db_now_ms())
        )
        await self.session.execute(
            insert_ignore(m.job_step, self._dialect).values(
                org_id=org_id,
                job_id=job_id,
                state="FAILED",
                fencing_token=None,
                detail=error[:1000],
                at_ms=db_now_ms(),
            )
        )

    async def set_job(self, *, org_id: str, job_id: str, **values: Any) -> None:
        await self.session.execute(
            update(m.job).where(m.job.c.org_id == org_id, m.job.c.job_id == job_id).values(**values)
        )

    async def steps(self, org_id: str, job_id: str) -> list[RowMapping]:
        s = m.job_step
        result = await self.session.execute(
            select(s).where(s.c.org_id == org_id, s.c.job_id == job_id).order_by(s.c.at_ms)
        )
        return list(result.mappings())

    # ------------------------------------------------------------------ installations

    async def installations(self, org_id: str, *, only_installed: bool = True) -> list[RowMapping]:
        i = m.installation
        stmt = select(i).where(i.c.org_id == org_id)
        if only_installed:
            stmt = stmt.where(i.c.state == "installed")
        result = await self.session.execute(stmt.order_by(i.c.app_id))
        return list(result.mappings())

    async def installation(self, org_id: str, app_id: str) -> RowMapping | None:
        i = m.installation
        result = await self.session.execute(
            select(i).where(i.c.org_id == org_id, i.c.app_id == app_id)
        )
        return result.mappings().first()

    async def upsert_installation(
        self,
        *,
        org_id: str,
        app_id: str,
        installation_id: str,
        version: str,
        digest: str,
        state: str,
        revision: int,
    ) -> None:
        i = m.installation
        values = {
            "version": version,
            "digest": digest,
            "state": state,
            "catalog_revision": revision,
        }
        await self.session.execute(
            upsert(i, self._dialect, [i.c.org_id, i.c.app_id], lambda _incoming: values).values(
                org_id=org_id, app_id=app_id, installation_id=installation_id, **values
            )
        )

    # ------------------------------------------------------------------ ownership

    async def owners(self, org_id: str) -> dict[tuple[str, str], str]:
        c = m.component
        result = await self.session.execute(
            select(c.c.kind, c.c.component_key, c.c.owner_app_id).where(c.c.org_id == org_id)
        )
        return {(r.kind, r.component_key.lower()): r.owner_app_id for r in result}

    async def claim_components(
        self, *, org_id: str, app_id: str, keys: list[tuple[str, str]], revision: int
    ) -> None:
        """Record ownership of components not owned yet (write-once: existing rows stay)."""
        for kind, key in keys:
            await self.session.execute(
                insert_ignore(m.component, self._dialect).values(
                    org_id=org_id,
                    kind=kind,
                    component_key=key.lower(),
                    owner_app_id=app_id,
                    first_revision=revision,
                )
            )

    async def namespace_owners(self, org_id: str) -> dict[str, str]:
        n = m.namespace
        result = await self.session.execute(
            select(n.c.namespace, n.c.owner_app_id).where(n.c.org_id == org_id)
        )
        return {r.namespace: r.owner_app_id for r in result}

    async def claim_namespaces(self, *, org_id: str, app_id: str, names: list[str]) -> None:
        for name in names:
            await self.session.execute(
                insert_ignore(m.namespace, self._dialect).values(
                    org_id=org_id, namespace=name, owner_app_id=app_id
                )
            )

    # ------------------------------------------------------------------ revisions, snapshots

    async def insert_revision(
        self, *, org_id: str, revision: int, job_id: str, installed: list[dict[str, str]]
    ) -> None:
        await self.session.execute(
            insert_ignore(m.revision, self._dialect).values(
                org_id=org_id,
                catalog_revision=revision,
                job_id=job_id,
                installed=json.dumps(installed, sort_keys=True),
                created_at_ms=db_now_ms(),
            )
        )

    async def revision(self, org_id: str, revision: int) -> RowMapping | None:
        r = m.revision
        result = await self.session.execute(
            select(r).where(r.c.org_id == org_id, r.c.catalog_revision == revision)
        )
        return result.mappings().first()

    async def insert_snapshot(
        self, *, org_id: str, revision: int, consumer: str, content: str, checksum: str
    ) -> None:
        await self.session.execute(
            insert_ignore(m.snapshot, self._dialect).values(
                org_id=org_id,
                catalog_revision=revision,
                consumer=consumer,
                content=content,
                checksum=checksum,
                created_at_ms=db_now_ms(),
            )
        )

    async def snapshot(self, org_id: str, revision: int, consumer: str) -> RowMapping | None:
        s = m.snapshot
        result = await self.session.execute(
            select(s).where(
                s.c.org_id == org_id, s.c.catalog_revision == revision, s.c.consumer == consumer
            )
        )
        return result.mappings().first()

    async def count_snapshots(self, org_id: str, revision: int) -> int:
        s = m.snapshot
        result = await self.session.execute(
            select(func.count())
            .select_from(s)
            .where(s.c.org_id == org_id, s.c.catalog_revision == revision)
        )
        return int(result.scalar_one())
