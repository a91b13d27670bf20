"""Runtime's side of a Catalog release: schema preparation and installing the definitions.

Catalog calls these as itself (workload `catalog`, capability `runtime.releases`), without a
user: a release job resumes after a crash, long after any user's delegation expired. The
org is this deployment's (phase one runs one) and must equal the org Catalog names.

- `schema`: validate the release's metadata against the active definitions (nothing stored)
  and reconcile the physical tables it needs through the schema owner (additive DDL only).
  Idempotent: a second call observes the tables and does nothing.
- `prepare`: create the release's roles that are missing, then apply its metadata as one
  metadata apply (new immutable versions; unchanged definitions stay as they are).
  Customizations survive according to each component's override policy: `keep` keeps a
  definition the org changed since the App's previous release installed it; objects always
  keep the fields the org (or an older release) added, because phase one never removes a
  field.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.catalog import (
    ReleaseComponent,
    ReleaseRequest,
    ReleaseState,
    SnapshotKeeper,
    SnapshotRejected,
    canonical_json,
)
from nexus.contracts.errors import BadRequest, Conflict
from nexus.identity.api import Directory
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.runtime.metadata.definitions import (
    FlowDef,
    InvalidMetadata,
    LayoutDef,
    ListViewDef,
    ObjectDef,
    PermissionSetDef,
    SharingRuleDef,
    ValidationRuleDef,
    check_batch,
    parse_batch,
)
from nexus.runtime.metadata.repository import MetadataRepository
from nexus.runtime.metadata.service import active_objects, apply_metadata
from nexus.runtime.schema.owner import SchemaConflict, reconcile_table
from nexus.runtime.schema.spec import desired_table

ENGINE_GENERATION = 1
#: What this engine executes of a release (Catalog admits a release only when it has these).
RELEASE_CAPABILITIES = ("runtime.metadata.v1", "runtime.flows.v1", "runtime.roles.v1")
#: component kind -> (metadata batch key, definition model)
BATCH_KINDS: dict[str, tuple[str, type[BaseModel]]] = {
    "object": ("objects", ObjectDef),
    "permission_set": ("permission_sets", PermissionSetDef),
    "sharing_rule": ("sharing_rules", SharingRuleDef),
    "layout": ("layouts", LayoutDef),
    "validation_rule": ("validation_rules", ValidationRuleDef),
    "flow": ("flows", FlowDef),
    "list_view": ("list_views", ListViewDef),
}
#: batch key -> the kind name the metadata store uses
STORE_KIND = {
    "objects": "object",
    "permission_sets": "permission_set",
    "sharing_rules": "sharing_rule",
    "layouts": "layout",
    "validation_rules": "validation_rule",
    "flows": "flow",
    "list_views": "list_view",
}


class ReleaseRefused(BadRequest):
    default_code = "RELEASE_REFUSED"


class OrgMismatch(Conflict):
    default_code = "ORG_MISMATCH"


async def release_state(engine: AsyncEngine, *, org_id: str | None = None) -> ReleaseState:
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        org = await Directory(session).first_org()
        if org is None:
            raise Conflict("no org yet", code="NO_ORG")
        if org_id is not None and org_id != org["org_id"]:
            raise OrgMismatch("the release names another org than this deployment's")
        state = await MetadataRepository(session).org_state(org["org_id"])
    return ReleaseState(
        org_id=org["org_id"],
        engine_generation=ENGINE_GENERATION,
        capabilities=list(RELEASE_CAPABILITIES),
        schema_generation=int(state["schema_generation"]) if state else 0,
        metadata_revision=int(state["metadata_revision"]) if state else 0,
        security_epoch=int(org["security_epoch"]),
    )


def _digest(model: BaseModel) -> str:
    return hashlib.sha256(model.model_dump_json().encode()).hexdigest()


def _problems(exc: InvalidMetadata) -> ReleaseRefused:
    return ReleaseRefused(
        "Runtime refused the release's metadata; nothing was applied",
        fields={p.path: p.message for p in exc.problems[:50]},
    )


async def _build_batch(
    engine: AsyncEngine, request: ReleaseRequest
) -> tuple[dict[str, list[Any]], list[str], list[dict[str, Any]]]:
    """The metadata batch of a release (customizations kept), the keys whose customization
    was kept, and the roles to create (in order)."""
    batch: dict[str, list[Any]] = {key: [] for key in STORE_KIND}
    kept: list[str] = []
    roles = [c.definition for c in request.components if c.kind == "role"]
    fields = [c for c in request.components if c.kind == "field"]
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        repo = MetadataRepository(session)
        active: dict[str, dict[str, str]] = {}
        for key, kind in STORE_KIND.items():
            rows = await repo.active_definitions(request.org_id, kind)
            active[key] = {r["name"].lower(): r["digest"] for r in rows}
        objects = await active_objects(repo, request.org_id)
    for comp in [*request.components, *request.deactivate]:
        if comp.kind not in BATCH_KINDS:
            continue
        key, model = BATCH_KINDS[comp.kind]
        definition = dict(comp.definition)
        if comp in request.deactivate:
            definition["active"] = False
        try:
            parsed = model.model_validate(definition)
        except ValidationError:
            parsed = None  # reported with its path by parse_batch below
        name = comp.key.lower()
        if (
            parsed is not None
            and comp.override_policy == "keep"
            and comp.previous is not None
            and name in active[key]
        ):
            try:
                previous = _digest(model.model_validate(comp.previous))
            except ValidationError:
                previous = None
            if active[key][name] not in (previous, _digest(parsed)):
                kept.append(f"{comp.kind}:{comp.key}")
                continue
        if comp.kind == "object":
            definition = _with_fields(definition, fields, objects.get(name))
        batch[key].append(definition)
    in_batch = {str(o.get("api_name", "")).lower() for o in batch["objects"]}
    for ext in fields:  # extensions of objects this release does not carry: the active ones
        target = str(ext.definition.get("object", "")).lower()
        if target not in in_batch and target in objects:
            base = objects[target].model_dump(mode="json", exclude_defaults=True)
            batch["objects"].append(_with_fields(base, fields, None))
            in_batch.add(target)
    return batch, kept, roles


def _with_fields(
    definition: dict[str, Any], extensions: list[ReleaseComponent], active: ObjectDef | None
) -> dict[str, Any]:
    """An object with the field components of other Apps that extend it, and the fields the
    active definition has that the release does not (phase one never removes a field)."""
    name = str(definition.get("api_name", ""))
    fields = list(definition.get("fields") or [])
    have = {str(f.get("api_name", "")).lower() for f in fields if isinstance(f, dict)}
    have.add("name")
    for ext in extensions:
        if str(ext.definition.get("object", "")).lower() == name.lower():
            extra = ext.definition.get("field")
            if isinstance(extra, dict) and str(extra.get("api_name", "")).lower() not in have:
                fields.append(extra)
                have.add(str(extra.get("api_name", "")).lower())
    if active is not None:
        for existing in active.fields:
            if existing.api_name.lower() not in have:
                fields.append(existing.model_dump(mode="json", exclude_defaults=True))
    return {**definition, "fields": fields}


async def prepare_schema(engine: AsyncEngine, request: ReleaseRequest) -> ReleaseState:
    """DDL_RECONCILED: validate, then reconcile every table the release needs."""
    await release_state(engine, org_id=request.org_id)
    raw, _kept, roles = await _build_batch(engine, request)
    try:
        batch = parse_batch(raw)
    except InvalidMetadata as exc:
        raise _problems(exc) from None
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        active = await active_objects(MetadataRepository(session), request.org_id)
        role_names = await Directory(session).role_names(request.org_id)
    problems = check_batch(batch, active, role_names | {str(r.get("name")) for r in roles})
    if problems:
        raise _problems(InvalidMetadata(problems))
    for obj in batch.objects:
        try:
            await reconcile_table(engine, desired_table(obj))
        except SchemaConflict as exc:
            raise ReleaseRefused(f"schema preparation failed: {exc}") from None
    return await release_state(engine, org_id=request.org_id)


def verify_snapshot(request: ReleaseRequest, keeper: SnapshotKeeper) -> None:
    """The release Runtime installs must be the published one: the snapshot verifies (the
    keeper holds the last one that did), belongs to the job's revision, and carries every
    component of the request unchanged."""
    if request.snapshot is None:
        return
    try:
        snapshot = keeper.offer(request.snapshot.model_dump())
    except SnapshotRejected as exc:
        raise ReleaseRefused(f"the release snapshot failed verification: {exc}") from None
    if snapshot.catalog_revision != request.catalog_revision:
        raise ReleaseRefused("the snapshot is not the job's catalog revision")
    published = {
        (c.get("kind"), c.get("key")): canonical_json(c.get("definition"))
        for c in snapshot.content.get("components", [])
        if c.get("owner") == request.app_id
    }
    for comp in request.components:
        if published.get((comp.kind, comp.key)) != canonical_json(comp.definition):
            raise ReleaseRefused(f"{comp.kind} {comp.key} is not the published definition")


async def prepare_release(
    engine: AsyncEngine, request: ReleaseRequest, keeper: SnapshotKeeper | None = None
) -> ReleaseState:
    """RUNTIME_PREPARED: verify the snapshot, roles, then the metadata apply; returns the
    axes after it."""
    await release_state(engine, org_id=request.org_id)
    if keeper is not None:
        verify_snapshot(request, keeper)
    raw, kept, roles = await _build_batch(engine, request)
    await _ensure_roles(engine, request.org_id, roles)
    try:
        result = await apply_metadata(engine, org_id=request.org_id, raw=raw)
    except InvalidMetadata as exc:
        raise _problems(exc) from None
    state = await release_state(engine, org_id=request.org_id)
    state.kept_overrides = kept
    state.changed = [f"{v['kind']}:{v['name']}" for v in result.versions]
    if keeper is not None and keeper.current is not None:
        state.verified_catalog_revision = keeper.current.catalog_revision
    return state


async def _ensure_roles(engine: AsyncEngine, org_id: str, roles: list[dict[str, Any]]) -> None:
    """Create the roles that do not exist yet, parents first (an existing role is kept)."""
    async with unit_of_work(session_factory(engine)) as session:
        directory = Directory(session)
        existing = await directory.role_names(org_id)
        pending = [r for r in roles if r.get("name") not in existing]
        while pending:
            ready = [r for r in pending if r.get("parent") in (None, *existing)]
            if not ready:
                names = ", ".join(sorted(str(r.get("name")) for r in pending))
                raise ReleaseRefused(f"roles with unknown parents: {names}")
            for role in ready:
                name = str(role["name"])
                await directory.create_role(org_id=org_id, name=name, parent=role.get("parent"))
                existing.add(name)
            pending = [r for r in pending if r not in ready]
