"""Apply a metadata batch: validate -> stage versions + journal DDL -> reconcile -> activate.

1. One transaction validates the whole batch against the active metadata, stores the new
   immutable definition versions (inactive), journals one schema operation per table whose
   physical shape must change, and records the apply as `staged`. Invalid batches store
   nothing.
2. The schema owner reconciles each journaled operation (observe, then additive DDL).
3. One transaction flips the apply to `active` by compare-and-set, moves the active pointers
   and advances the org's metadata revision (and SchemaGeneration when DDL ran).

A crash between any two steps leaves a `staged` apply; `resume_staged` (run by runtime-api at
start-up and by `nexus metadata resume`) completes it, re-observing the schema first.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.errors import Conflict
from nexus.identity.api import Directory
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.failpoints import crash_at
from nexus.platform.observability import get_logger
from nexus.runtime.metadata.definitions import (
    InvalidMetadata,
    MetadataBatch,
    ObjectDef,
    check_batch,
    parse_batch,
)
from nexus.runtime.metadata.repository import MetadataRepository
from nexus.runtime.schema.owner import SchemaConflict, reconcile_table
from nexus.runtime.schema.spec import TableSpec, desired_table

OBJECT = "object"
PERMISSION_SET = "permission_set"
SHARING_RULE = "sharing_rule"
LAYOUT = "layout"
VALIDATION_RULE = "validation_rule"
FLOW = "flow"
LIST_VIEW = "list_view"
SECURITY_KINDS = frozenset({PERMISSION_SET, SHARING_RULE})
FAILPOINT_AFTER_DDL = "metadata.after_ddl"
log = get_logger(__name__)


class MetadataApplyFailed(Conflict):
    default_code = "METADATA_APPLY_FAILED"


@dataclass
class ApplyResult:
    apply_id: str
    versions: list[dict[str, Any]] = field(default_factory=list)  # [{kind, name, version}]
    unchanged: list[str] = field(default_factory=list)
    schema_generation: int = 0
    metadata_revision: int = 0
    state: str = "staged"


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


async def active_objects(repo: MetadataRepository, org_id: str) -> dict[str, ObjectDef]:
    rows = await repo.active_definitions(org_id, OBJECT)
    return {row["name"].lower(): ObjectDef.model_validate_json(row["body"]) for row in rows}


async def apply_metadata(
    engine: AsyncEngine, *, org_id: str, raw: Any, failpoint: str | None = None
) -> ApplyResult:
    """Apply a batch atomically; InvalidMetadata (nothing stored) or the new versions."""
    batch = parse_batch(raw)
    result = await _stage(engine, org_id=org_id, batch=batch)
    if not result.versions:
        return await _state(engine, org_id, result)
    return await _complete(engine, org_id=org_id, apply_id=result.apply_id, failpoint=failpoint)


async def _stage(engine: AsyncEngine, *, org_id: str, batch: MetadataBatch) -> ApplyResult:
    apply_id = str(uuid.uuid4())
    result = ApplyResult(apply_id=apply_id)
    async with unit_of_work(session_factory(engine)) as session:
        repo = MetadataRepository(session)
        active = await active_objects(repo, org_id)
        roles = await Directory(session).role_names(org_id)
        problems = check_batch(batch, active, roles)
        if problems:
            raise InvalidMetadata(problems)
        await repo.ensure_org_state(org_id)
        now = await read_now_ms(session)
        stager = _Stager(repo, result, org_id=org_id, apply_id=apply_id, now=now)
        staged: list[list[Any]] = []
        for obj in batch.objects:
            version = await stager.stage(OBJECT, obj.api_name, obj.model_dump_json())
            if version is None:
                continue
            staged.append([OBJECT, version[0], version[1]])
            spec = desired_table(obj)
            previous = active.get(obj.api_name.lower())
            if previous is None or desired_table(previous).fingerprint() != spec.fingerprint():
                await repo.insert_operation(
                    org_id=org_id,
                    operation_id=str(uuid.uuid4()),
                    apply_id=apply_id,
                    table_name=spec.name,
                    desired_spec=spec.to_json(),
                    desired_fingerprint=spec.fingerprint(),
                    state="pending",
                    attempts=0,
                    created_at_ms=now,
                )
        for kind, items in (
            (PERMISSION_SET, batch.permission_sets),
            (SHARING_RULE, batch.sharing_rules),
            (LAYOUT, batch.layouts),
            (VALIDATION_RULE, batch.validation_rules),
            (FLOW, batch.flows),
            (LIST_VIEW, batch.list_views),
        ):
            for item in items:
                version = await stager.stage(kind, item.api_name, item.model_dump_json())
                if version is not None:
                    staged.append([kind, version[0], version[1]])
        if staged:
            await repo.insert_apply(
                org_id=org_id, apply_id=apply_id, definitions=staged, now_ms=now
            )
    return result


class _Stager:
    """Stores new inactive versions for one apply; reads each kind's versions once."""

    def __init__(
        self, repo: MetadataRepository, result: ApplyResult, *, org_id: str, apply_id: str, now: int
    ) -> None:
        self.repo = repo
        self.result = result
        self.org_id = org_id
        self.apply_id = apply_id
        self.now = now
        self._digests: dict[str, dict[str, str]] = {}
        self._latest: dict[str, dict[str, int]] = {}

    async def stage(self, kind: str, api_name: str, body: str) -> tuple[str, int] | None:
        """A new inactive version unless the active one has the same digest."""
        if kind not in self._digests:
            rows = await self.repo.active_definitions(self.org_id, kind)
            self._digests[kind] = {r["name"].lower(): r["digest"] for r in rows}
            self._latest[kind] = await self.repo.latest_versions(self.org_id, kind)
        digest = _digest(body)
        if self._digests[kind].get(api_name.lower()) == digest:
            self.result.unchanged.append(api_name)
            return None
        latest = self._latest[kind]
        name = next((n for n in latest if n.lower() == api_name.lower()), api_name)
        version = latest.get(name, 0) + 1
        latest[name] = version
        await self.repo.insert_definition(
            org_id=self.org_id,
            kind=kind,
            name=name,
            version=version,
            body=body,
            digest=digest,
            apply_id=self.apply_id,
            created_at_ms=self.now,
        )
        self.result.versions.append({"kind": kind, "name": name, "version": version})
        return name, version


async def _complete(
    engine: AsyncEngine, *, org_id: str, apply_id: str, failpoint: str | None = None
) -> ApplyResult:
    sessions = session_factory(engine)
    async with unit_of_work(sessions, readonly=True) as session:
        repo = MetadataRepository(session)
        operations = await repo.operations(org_id, apply_id)
        apply_row = await repo.apply(org_id, apply_id)
    if apply_row is None:
        raise MetadataApplyFailed(f"no metadata apply {apply_id}")
    ran_ddl = False
    for op in operations:
        if op["state"] == "failed":
            raise MetadataApplyFailed(op["error"] or "schema operation failed")
        spec = TableSpec.from_json(op["desired_spec"])
        try:
            _before, after = await reconcile_table(engine, spec)
        except SchemaConflict as exc:
            await _fail(engine, org_id, apply_id, op["operation_id"], str(exc))
            raise MetadataApplyFailed(str(exc)) from None
        ran_ddl = True
        async with unit_of_work(sessions) as session:
            await MetadataRepository(session).finish_operation(
                org_id=org_id,
                operation_id=op["operation_id"],
                state="applied",
                actual_fingerprint=after,
                now_ms=await read_now_ms(session),
            )
    crash_at(failpoint, FAILPOINT_AFTER_DDL)  # between DDL and activation
    async with unit_of_work(sessions) as session:
        repo = MetadataRepository(session)
        now = await read_now_ms(session)
        if await repo.finish_apply(org_id=org_id, apply_id=apply_id, state="active", now_ms=now):
            definitions = json.loads(apply_row["definitions"])
            for kind, name, version in definitions:
                await repo.set_active(
                    org_id=org_id, kind=kind, name=name, version=version, now_ms=now
                )
            await repo.advance_org_state(org_id, schema_changed=ran_ddl)
            if any(kind in SECURITY_KINDS for kind, _, _ in definitions):
                # security-critical changes do not wait for metadata caches (seed §8.7)
                await Directory(session).advance_security_epoch_if_org(org_id)
    log.info("metadata.applied", apply_id=apply_id, operations=len(operations))
    result = ApplyResult(
        apply_id=apply_id,
        versions=[
            {"kind": k, "name": n, "version": v} for k, n, v in json.loads(apply_row["definitions"])
        ],
    )
    return await _state(engine, org_id, result)


async def _fail(
    engine: AsyncEngine, org_id: str, apply_id: str, operation_id: str, error: str
) -> None:
    async with unit_of_work(session_factory(engine)) as session:
        repo = MetadataRepository(session)
        now = await read_now_ms(session)
        await repo.finish_operation(
            org_id=org_id,
            operation_id=operation_id,
            state="failed",
            actual_fingerprint=None,
            now_ms=now,
            error=error,
        )
        await repo.finish_apply(
            org_id=org_id, apply_id=apply_id, state="failed", now_ms=now, error=error
        )


async def _state(engine: AsyncEngine, org_id: str, result: ApplyResult) -> ApplyResult:
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        repo = MetadataRepository(session)
        state = await repo.org_state(org_id)
        apply_row = await repo.apply(org_id, result.apply_id)
    if state is not None:
        result.schema_generation = int(state["schema_generation"])
        result.metadata_revision = int(state["metadata_revision"])
    result.state = apply_row["state"] if apply_row is not None else "active"
    return result


async def resume_staged(engine: AsyncEngine, *, org_id: str | None = None) -> list[str]:
    """Complete every staged apply (after a crash); returns the apply ids completed."""
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        staged = await MetadataRepository(session).staged_applies(org_id)
    done = []
    for row in staged:
        try:
            await _complete(engine, org_id=row["org_id"], apply_id=row["apply_id"])
            done.append(row["apply_id"])
        except MetadataApplyFailed as exc:
            log.error("metadata.resume_failed", apply_id=row["apply_id"], error=exc.message)
    return done
