"""The journaled release state machine (seed §8.11, docs/adr/0023).

    DRAFT -> VALIDATED -> RESERVED -> DDL_RECONCILED -> CATALOG_COMMITTED
          -> SNAPSHOT_PUBLISHED -> RUNTIME_PREPARED -> ACTIVE          (or FAILED)

Each transition is one transaction that moves the job's state by compare-and-set and writes
the journal row; from RESERVED on it also requires the job's fencing token to be the org's
current writer token (and renews the writer lease), so a job whose lease was taken over can
never advance. Every step is idempotent: a crash anywhere leaves the job in the last state it
committed, and `resume` redoes the next step (Runtime's schema preparation observes before it
changes anything; its metadata apply stores nothing for unchanged definitions; revisions and
snapshots are written inside the transition that records them).

CatalogRevision is allocated at CATALOG_COMMITTED (monotonic per org); the active pointer
moves at ACTIVE by CAS (`active_revision < :rev`, current token). Rollback is a new job and a
newer revision pointing at older content: nothing is ever decremented.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from nexus.catalog.checks import check_release, check_uninstall
from nexus.catalog.errors import (
    AlreadyInstalled,
    OrgBusy,
    ReleaseInvalid,
    StaleFencingToken,
    VersionTaken,
)
from nexus.catalog.loader import Package
from nexus.catalog.release import Release, release_from_body
from nexus.catalog.repository import CatalogRepository
from nexus.catalog.runtime_client import RuntimeRefused, RuntimeReleases, RuntimeUnavailable
from nexus.catalog.snapshots import build_projections
from nexus.contracts.catalog import (
    Consumer,
    ReleaseComponent,
    ReleaseRequest,
    Snapshot,
    canonical_json,
)
from nexus.contracts.errors import NexusError
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.failpoints import crash_at
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled

STATES = (
    "DRAFT",
    "VALIDATED",
    "RESERVED",
    "DDL_RECONCILED",
    "CATALOG_COMMITTED",
    "SNAPSHOT_PUBLISHED",
    "RUNTIME_PREPARED",
    "ACTIVE",
)
NEXT = dict(itertools.pairwise(STATES))
FAILPOINT_PREFIX = "catalog.after."
DEFAULT_LEASE_MS = 300_000
DEFAULT_REPLICA_ACK_TIMEOUT_S = 30.0
REPLICA_POLL_S = 0.2
log = get_logger(__name__)

Progress = Callable[[str, str], None]


@dataclass
class CatalogContext:
    """What a release job needs: the catalog database, Runtime, and its settings."""

    engine: AsyncEngine
    runtime: RuntimeReleases
    lease_ms: int = DEFAULT_LEASE_MS
    failpoint: str | None = None
    #: capabilities provided beside Runtime's (Integration's, from its /version)
    extra_capabilities: Callable[[], Awaitable[list[str]]] | None = None
    #: RUNTIME_PREPARED waits this long for every live runtime-api replica's acknowledgement
    replica_ack_timeout_s: float = DEFAULT_REPLICA_ACK_TIMEOUT_S


@dataclass
class JobResult:
    job_id: str
    operation: str
    app_id: str
    version: str | None
    state: str
    catalog_revision: int | None
    schema_generation: int | None
    security_epoch: int | None
    error: str | None = None
    kept_overrides: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, row: RowMapping) -> JobResult:
        return cls(
            job_id=row["job_id"],
            operation=row["operation"],
            app_id=row["app_id"],
            version=row["version"],
            state=row["state"],
            catalog_revision=row["catalog_revision"],
            schema_generation=row["schema_generation"],
            security_epoch=row["security_epoch"],
            error=row["error"],
        )


# ---------------------------------------------------------------------------- starting jobs


async def start_apply(
    ctx: CatalogContext, *, package: Package, operation: str = "install"
) -> tuple[str, str]:
    """Record the release (version -> digest, forever) and a DRAFT job; (org_id, job_id).

    VersionTaken when this version was published with other content; AlreadyInstalled when
    the org already runs exactly this release.
    """
    state = await ctx.runtime.state()  # Runtime says which org this deployment serves
    org_id = state.org_id
    manifest = package.manifest
    digest = package.digest
    body = canonical_json(package.canonical()).decode("utf-8")
    job_id = str(uuid.uuid4())
    async with unit_of_work(session_factory(ctx.engine)) as session:
        repo = CatalogRepository(session)
        await repo.ensure_org(org_id, await _now(session))
        known = await repo.release(manifest.app_id, manifest.version)
        if (
            known is not None
            and known["digest"] != digest
            and not await repo.release_in_use(known["digest"])  # only ever refused
        ):
            await repo.delete_release(manifest.app_id, manifest.version)
            known = None
        if known is not None and known["digest"] != digest:
            raise VersionTaken(
                f"{manifest.app_id} {manifest.version} was published as {known['digest']}; "
                "a version maps to one content forever (publish a new version)"
            )
        if known is None:
            other = await repo.release_by_digest(digest)
            if other is not None:  # the digest covers the version, so this is the same row
                raise VersionTaken(f"this content is already {other['app_id']} {other['version']}")
            await repo.insert_release(
                app_id=manifest.app_id,
                version=manifest.version,
                digest=digest,
                body=body,
                now_ms=await _now(session),
            )
        current = await repo.installation(org_id, manifest.app_id)
        if current is not None and current["state"] == "installed" and current["digest"] == digest:
            raise AlreadyInstalled(f"{manifest.app_id} {manifest.version} is already installed")
        await _insert_job(
            repo,
            session,
            org_id=org_id,
            job_id=job_id,
            operation=operation,
            app_id=manifest.app_id,
            version=manifest.version,
            digest=digest,
            previous_digest=current["digest"]
            if current and current["state"] == "installed"
            else None,
        )
    return org_id, job_id


async def start_rollback(ctx: CatalogContext, *, app_id: str, version: str) -> tuple[str, str]:
    """A job re-installing an earlier release of an installed App (a newer revision)."""
    state = await ctx.runtime.state()
    job_id = str(uuid.uuid4())
    async with unit_of_work(session_factory(ctx.engine)) as session:
        repo = CatalogRepository(session)
        known = await repo.release(app_id, version)
        if known is None:
            raise ReleaseInvalid(f"no release {app_id} {version} was ever published here")
        current = await repo.installation(state.org_id, app_id)
        if current is None or current["state"] != "installed":
            raise ReleaseInvalid(f"{app_id} is not installed")
        if current["digest"] == known["digest"]:
            raise AlreadyInstalled(f"{app_id} {version} is already installed")
        await repo.ensure_org(state.org_id, await _now(session))
        await _insert_job(
            repo,
            session,
            org_id=state.org_id,
            job_id=job_id,
            operation="rollback",
            app_id=app_id,
            version=version,
            digest=known["digest"],
            previous_digest=current["digest"],
        )
    return state.org_id, job_id


async def start_uninstall(ctx: CatalogContext, *, app_id: str) -> tuple[str, str]:
    state = await ctx.runtime.state()
    job_id = str(uuid.uuid4())
    async with unit_of_work(session_factory(ctx.engine)) as session:
        repo = CatalogRepository(session)
        current = await repo.installation(state.org_id, app_id)
        if current is None or current["state"] != "installed":
            raise ReleaseInvalid(f"{app_id} is not installed")
        await _insert_job(
            repo,
            session,
            org_id=state.org_id,
            job_id=job_id,
            operation="uninstall",
            app_id=app_id,
            version=current["version"],
            digest=current["digest"],
            previous_digest=current["digest"],
        )
    return state.org_id, job_id


async def _insert_job(
    repo: CatalogRepository, session: AsyncSession, *, org_id: str, job_id: str, **values: Any
) -> None:
    now = await _now(session)
    await repo.insert_job(
        org_id=org_id,
        job_id=job_id,
        state="DRAFT",
        created_at_ms=now,
        updated_at_ms=now,
        **values,
    )
    await repo.advance_job(
        org_id=org_id, job_id=job_id, from_state="DRAFT", to_state="DRAFT", token=None
    )


async def _now(session: AsyncSession) -> int:
    return await read_now_ms(session)


# ---------------------------------------------------------------------------- running jobs


async def run_job(
    ctx: CatalogContext, *, org_id: str, job_id: str, progress: Progress | None = None
) -> JobResult:
    """Drive a job from its journaled state to ACTIVE (or FAILED).

    Runtime unreachable (RuntimeUnavailable) and another job holding the org (OrgBusy)
    propagate and leave the job where it is, to be resumed; a refusal fails the job.
    """
    runner = _Runner(ctx, org_id, job_id, progress)
    return await runner.run()


async def resume(ctx: CatalogContext, *, progress: Progress | None = None) -> list[JobResult]:
    """Continue every unfinished job, oldest first."""
    async with unit_of_work(session_factory(ctx.engine), readonly=True) as session:
        jobs = await CatalogRepository(session).unfinished_jobs()
    results = []
    for job in jobs:
        results.append(
            await run_job(ctx, org_id=job["org_id"], job_id=job["job_id"], progress=progress)
        )
    return results


class _MovedOn(Exception):
    """Another runner (a resume elsewhere) advanced this job first."""


class _Runner:
    def __init__(
        self, ctx: CatalogContext, org_id: str, job_id: str, progress: Progress | None
    ) -> None:
        self.ctx = ctx
        self.org_id = org_id
        self.job_id = job_id
        self.progress = progress
        self.sessions = session_factory(ctx.engine)
        self.kept: list[str] = []

    async def job(self) -> RowMapping:
        async with unit_of_work(self.sessions, readonly=True) as session:
            row = await CatalogRepository(session).job(self.org_id, self.job_id)
        if row is None:
            raise ReleaseInvalid(f"no release job {self.job_id}")
        return row

    async def run(self) -> JobResult:
        job = await self.job()
        if job["state"] == "DRAFT":
            self._failpoint("DRAFT")
        while job["state"] not in ("ACTIVE", "FAILED"):
            target = NEXT[job["state"]]
            try:
                async with self._renewing(job):
                    detail = await getattr(self, f"_to_{target.lower()}")(job)
            except _MovedOn:
                log.info("catalog.job_moved_on", job_id=self.job_id)
                return JobResult.of(await self.job())
            except (ReleaseInvalid, RuntimeRefused, StaleFencingToken) as exc:
                await self._fail(job, exc)
                return JobResult.of(await self.job())
            job = await self.job()
            if self.progress is not None:
                self.progress(job["state"], detail)
            self._failpoint(job["state"])
        result = JobResult.of(job)
        result.kept_overrides = self.kept
        return result

    @asynccontextmanager
    async def _renewing(self, job: RowMapping) -> AsyncIterator[None]:
        """Renew the job's writer lease every third of its duration while a step runs (a
        long schema change or metadata apply must not let the lease lapse mid-step)."""
        token = job["fencing_token"]
        if token is None:
            yield
            return

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.ctx.lease_ms / 3000)
                try:
                    async with unit_of_work(self.sessions) as session:
                        held = await CatalogRepository(session).renew_writer(
                            org_id=self.org_id,
                            job_id=self.job_id,
                            token=token,
                            lease_ms=self.ctx.lease_ms,
                        )
                except Exception as exc:  # noqa: BLE001 - try again at the next third
                    unless_cancelled()
                    log.warning("catalog.lease_renewal_failed", error=type(exc).__name__)
                    continue
                if not held:
                    return  # taken over: the step's transition will refuse to advance

        task = asyncio.create_task(renew(), name=f"lease-{self.job_id}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _failpoint(self, state: str) -> None:
        crash_at(self.ctx.failpoint, f"{FAILPOINT_PREFIX}{state}")  # right after it committed

    async def _fail(self, job: RowMapping, exc: NexusError | StaleFencingToken) -> None:
        message = exc.message if isinstance(exc, NexusError) else str(exc)
        if isinstance(exc, NexusError) and exc.fields:
            message += " (" + "; ".join(f"{k}: {v}" for k, v in list(exc.fields.items())[:10]) + ")"
        log.warning("catalog.job_failed", job_id=self.job_id, error=type(exc).__name__)
        async with unit_of_work(self.sessions) as session:
            repo = CatalogRepository(session)
            await repo.fail_job(org_id=self.org_id, job_id=self.job_id, error=message)
            if job["fencing_token"] is not None:
                await repo.release_writer(
                    org_id=self.org_id, job_id=self.job_id, token=job["fencing_token"]
                )

    async def _advance(
        self,
        session: AsyncSession,
        job: RowMapping,
        to_state: str,
        *,
        detail: str | None = None,
        **values: Any,
    ) -> None:
        repo = CatalogRepository(session)
        token = job["fencing_token"]
        if token is not None and not await repo.renew_writer(
            org_id=self.org_id, job_id=self.job_id, token=token, lease_ms=self.ctx.lease_ms
        ):
            raise StaleFencingToken(
                f"fencing token {token} is no longer the org's writer token: another job "
                "took the writer lease; this job cannot advance"
            )
        moved = await repo.advance_job(
            org_id=self.org_id,
            job_id=self.job_id,
            from_state=job["state"],
            to_state=to_state,
            token=token,
            detail=detail,
            **values,
        )
        if not moved:
            current = await repo.job(self.org_id, self.job_id)
            if current is not None and current["state"] != job["state"]:
                raise _MovedOn(current["state"])  # another runner advanced it: let it finish
            raise StaleFencingToken(f"job {self.job_id} lost its fencing token")

    # ------------------------------------------------------------------ the release content

    async def _release(self, job: RowMapping) -> Release:
        async with unit_of_work(self.sessions, readonly=True) as session:
            row = await CatalogRepository(session).release_by_digest(job["digest"])
        if row is None:
            raise ReleaseInvalid(f"the release {job['digest']} is not stored")
        return release_from_body(row["body"])

    async def _request(self, job: RowMapping) -> ReleaseRequest:
        """What Runtime receives: this release's components (aliases resolved) with the
        previous release's definitions for the override policy; an uninstall deactivates."""
        release = await self._release(job)
        async with unit_of_work(self.sessions, readonly=True) as session:
            repo = CatalogRepository(session)
            previous: Release | None = None
            if job["previous_digest"] is not None:
                row = await repo.release_by_digest(job["previous_digest"])
                previous = release_from_body(row["body"]) if row is not None else None
        before = previous.runtime_definitions() if previous is not None else {}
        components = [
            ReleaseComponent(
                kind=c.kind,
                key=c.key,
                definition=definition,
                override_policy=c.override_policy,
                previous=before.get((c.kind, c.key)),
            )
            for c, definition in release.runtime_components()
        ]
        request = ReleaseRequest(
            org_id=self.org_id,
            catalog_revision=job["catalog_revision"] or 0,
            fencing_token=job["fencing_token"] or 0,
        )
        if job["operation"] == "uninstall":
            request.deactivate = [
                comp
                for comp, placed in zip(components, release.runtime_components(), strict=True)
                if placed[0].removal_policy == "deactivate"
                and comp.kind in ("flow", "validation_rule")
            ]
        else:
            request.components = components
        return request

    # ------------------------------------------------------------------ the steps

    async def _to_validated(self, job: RowMapping) -> str:
        async with unit_of_work(self.sessions, readonly=True) as session:
            repo = CatalogRepository(session)
            installations = await repo.installations(self.org_id)
            releases = {}
            for inst in installations:
                row = await repo.release_by_digest(inst["digest"])
                if row is not None:
                    releases[inst["app_id"]] = release_from_body(row["body"])
            owners = await repo.owners(self.org_id)
            namespaces = await repo.namespace_owners(self.org_id)
        if job["operation"] == "uninstall":
            problems = check_uninstall(job["app_id"], releases)
            detail = "no installed App depends on it"
        else:
            release = await self._release(job)
            state = await self.ctx.runtime.state()
            capabilities = set(state.capabilities)
            for other in releases.values():
                capabilities |= set(other.manifest.provides)
            if self.ctx.extra_capabilities is not None and not set(
                release.manifest.requires.capabilities
            ).issubset(capabilities):
                capabilities |= set(await self.ctx.extra_capabilities())
            problems = check_release(
                release,
                installed=releases,
                owners=owners,
                namespaces=namespaces,
                engine_generation=state.engine_generation,
                capabilities=capabilities,
                rollback=job["operation"] == "rollback",
            )
            detail = f"{len(release.components)} component(s), digest {job['digest'][:19]}"
        if problems:
            what = "uninstalled" if job["operation"] == "uninstall" else "installed"
            raise ReleaseInvalid(f"{job['app_id']} cannot be {what}: " + "; ".join(problems))
        async with unit_of_work(self.sessions) as session:
            await self._advance(session, job, "VALIDATED", detail=detail)
        return detail

    async def _to_reserved(self, job: RowMapping) -> str:
        async with unit_of_work(self.sessions) as session:
            repo = CatalogRepository(session)
            org = await repo.org(self.org_id)
            if org is None:
                raise ReleaseInvalid("the org has no catalog state")
            if org["writer_job"] != self.job_id and not await repo.acquire_writer(
                org_id=self.org_id, job_id=self.job_id, lease_ms=self.ctx.lease_ms
            ):
                raise OrgBusy(
                    f"release job {org['writer_job']} holds the org's writer lease; "
                    "resume this job when it has finished"
                )
            org = await repo.org(self.org_id)
            assert org is not None  # noqa: S101 - read in the same transaction
            token = int(org["writer_token"])
            await self._advance(
                session, job, "RESERVED", detail=f"fencing token {token}", fencing_token=token
            )
        return f"writer lease, fencing token {token}"

    async def _to_ddl_reconciled(self, job: RowMapping) -> str:
        if job["operation"] == "uninstall":
            detail = "nothing to prepare (an uninstall removes no schema)"
            async with unit_of_work(self.sessions) as session:
                await self._advance(session, job, "DDL_RECONCILED", detail=detail)
            return detail
        state = await self.ctx.runtime.schema(await self._request(job))
        detail = f"SchemaGeneration {state.schema_generation}"
        async with unit_of_work(self.sessions) as session:
            await self._advance(
                session,
                job,
                "DDL_RECONCILED",
                detail=detail,
                schema_generation=state.schema_generation,
            )
        return detail

    async def _to_catalog_committed(self, job: RowMapping) -> str:
        uninstall = job["operation"] == "uninstall"
        release = await self._release(job)
        async with unit_of_work(self.sessions) as session:
            repo = CatalogRepository(session)
            revision = await repo.allocate_revision(self.org_id)
            current = await repo.installation(self.org_id, job["app_id"])
            await repo.upsert_installation(
                org_id=self.org_id,
                app_id=job["app_id"],
                installation_id=current["installation_id"] if current else str(uuid.uuid4()),
                version=job["version"],
                digest=job["digest"],
                state="uninstalled" if uninstall else "installed",
                revision=revision,
            )
            if not uninstall:
                await repo.claim_components(
                    org_id=self.org_id,
                    app_id=job["app_id"],
                    keys=[(c.kind, c.key) for c in release.components],
                    revision=revision,
                )
                await repo.claim_namespaces(
                    org_id=self.org_id,
                    app_id=job["app_id"],
                    names=list(release.manifest.namespaces),
                )
            installed = [
                {"app_id": i["app_id"], "version": i["version"], "digest": i["digest"]}
                for i in await repo.installations(self.org_id)
            ]
            await repo.insert_revision(
                org_id=self.org_id, revision=revision, job_id=self.job_id, installed=installed
            )
            await self._advance(
                session,
                job,
                "CATALOG_COMMITTED",
                detail=f"CatalogRevision {revision}",
                catalog_revision=revision,
            )
        return f"CatalogRevision {revision}"

    async def _to_snapshot_published(self, job: RowMapping) -> str:
        revision = int(job["catalog_revision"])
        async with unit_of_work(self.sessions) as session:
            repo = CatalogRepository(session)
            row = await repo.revision(self.org_id, revision)
            if row is None:
                raise ReleaseInvalid(f"revision {revision} is not recorded")
            releases = []
            for entry in json.loads(row["installed"]):
                stored = await repo.release_by_digest(entry["digest"])
                if stored is not None:
                    releases.append(release_from_body(stored["body"]))
            checksums = []
            for consumer, content in build_projections(releases).items():
                checksum = Snapshot.checksum_of(
                    consumer=consumer,
                    org_id=self.org_id,
                    catalog_revision=revision,
                    content=content,
                )
                await repo.insert_snapshot(
                    org_id=self.org_id,
                    revision=revision,
                    consumer=consumer,
                    content=canonical_json(content).decode("utf-8"),
                    checksum=checksum,
                )
                checksums.append(f"{consumer} {checksum[:12]}")
            detail = "snapshots " + ", ".join(checksums)
            await self._advance(session, job, "SNAPSHOT_PUBLISHED", detail=detail)
        return detail

    async def _to_runtime_prepared(self, job: RowMapping) -> str:
        request = await self._request(job)
        request.app_id = job["app_id"]
        request.snapshot = await read_snapshot(
            self.ctx.engine,
            consumer="runtime",
            org_id=self.org_id,
            revision=int(job["catalog_revision"]),
        )
        state = await self.ctx.runtime.prepare(request)
        self.kept = state.kept_overrides
        replicas = await self._acknowledged(int(job["catalog_revision"]))
        detail = (
            f"{len(state.changed)} definition(s) changed, SchemaGeneration "
            f"{state.schema_generation}, SecurityEpoch {state.security_epoch}, "
            f"{replicas} runtime-api replica(s) acknowledged"
        )
        if state.kept_overrides:
            detail += f", kept {len(state.kept_overrides)} customization(s)"
        async with unit_of_work(self.sessions) as session:
            await self._advance(
                session,
                job,
                "RUNTIME_PREPARED",
                detail=detail,
                schema_generation=state.schema_generation,
                security_epoch=state.security_epoch,
            )
        return detail

    async def _acknowledged(self, revision: int) -> int:
        """Wait until every live runtime-api replica preloaded `revision`; how many are live.
        RuntimeUnavailable naming the missing replicas when the timeout passes first (the
        job stays at SNAPSHOT_PUBLISHED and resumes from there)."""
        deadline = time.monotonic() + self.ctx.replica_ack_timeout_s
        while True:
            acks = await self.ctx.runtime.replicas()
            missing = acks.missing(revision)
            if not missing:
                return sum(1 for r in acks.replicas if r.live)
            if time.monotonic() >= deadline:
                raise RuntimeUnavailable(
                    f"runtime-api replica(s) {', '.join(missing)} did not acknowledge "
                    f"CatalogRevision {revision} within {self.ctx.replica_ack_timeout_s:g} s"
                )
            await asyncio.sleep(REPLICA_POLL_S)

    async def _to_active(self, job: RowMapping) -> str:
        revision = int(job["catalog_revision"])
        token = int(job["fencing_token"])
        async with unit_of_work(self.sessions) as session:
            repo = CatalogRepository(session)
            if not await repo.advance_active(org_id=self.org_id, revision=revision, token=token):
                raise StaleFencingToken(
                    f"the active pointer could not move to revision {revision} "
                    "(a newer revision is active or the fencing token is stale)"
                )
            await self._advance(session, job, "ACTIVE", detail=f"CatalogRevision {revision}")
            await repo.release_writer(org_id=self.org_id, job_id=self.job_id, token=token)
        return f"active pointer -> CatalogRevision {revision}"


# ---------------------------------------------------------------------------- reading


async def catalog_status(engine: AsyncEngine, *, org_id: str | None = None) -> dict[str, Any]:
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        repo = CatalogRepository(session)
        org = await repo.org(org_id) if org_id else await repo.first_org()
        if org is None:
            return {"org_id": org_id, "catalog_revision": 0, "active_revision": 0, "apps": []}
        oid = org["org_id"]
        active = await repo.revision(oid, int(org["active_revision"]))
        apps = json.loads(active["installed"]) if active is not None else []
        jobs = await repo.recent_jobs(oid, limit=10)
        installations = await repo.installations(oid, only_installed=False)
    return {
        "org_id": oid,
        "catalog_revision": int(org["catalog_revision"]),
        "active_revision": int(org["active_revision"]),
        "writer_token": int(org["writer_token"]),
        "apps": apps,
        "installations": {i["app_id"]: i["state"] for i in installations},
        "jobs": [
            {
                "job_id": j["job_id"],
                "operation": j["operation"],
                "app_id": j["app_id"],
                "version": j["version"],
                "state": j["state"],
                "catalog_revision": j["catalog_revision"],
                "error": j["error"],
            }
            for j in jobs
        ],
    }


async def read_snapshot(
    engine: AsyncEngine,
    *,
    consumer: Consumer,
    org_id: str | None = None,
    revision: int | None = None,
) -> Snapshot | None:
    """The consumer's projection of the org's ACTIVE revision (or of `revision`, published
    but maybe not active yet); None when there is none."""
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        repo = CatalogRepository(session)
        org = await repo.org(org_id) if org_id else await repo.first_org()
        wanted = revision if revision is not None else (org["active_revision"] if org else 0)
        if org is None or not wanted:
            return None
        row = await repo.snapshot(org["org_id"], int(wanted), consumer)
    if row is None:
        return None
    return Snapshot(
        consumer=consumer,
        org_id=row["org_id"],
        catalog_revision=int(row["catalog_revision"]),
        content=json.loads(row["content"]),
        checksum=row["checksum"],
    )
