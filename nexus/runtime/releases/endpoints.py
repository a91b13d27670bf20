"""Runtime's release API for Catalog (`/internal/v1/runtime/releases/...`).

Called by the `catalog` workload for itself (capability `runtime.releases`), never for a
user: a release job is resumed from Catalog's journal after a crash, when no delegation is
left. Catalog decided who may install (a System Administrator, asked of Runtime when the job
was started); here Runtime decides whether the release's metadata is valid.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from nexus.contracts.catalog import (
    RELEASE_PREPARE_PATH,
    RELEASE_REPLICAS_PATH,
    RELEASE_SCHEMA_PATH,
    RELEASE_STATE_PATH,
    RELEASES_CAPABILITY,
    ReleaseRequest,
    ReleaseState,
    ReplicaAcks,
    SnapshotKeeper,
)
from nexus.identity.api import WorkloadCall, workload_call
from nexus.platform.service_app import ServiceState
from nexus.runtime.releases.replicas import (
    ReplicaHeartbeat,
    check_fence,
    record_prepared,
    replica_acks,
)
from nexus.runtime.releases.service import prepare_release, prepare_schema, release_state

router = APIRouter()
Caller = Annotated[WorkloadCall, Depends(workload_call(RELEASES_CAPABILITY))]


def _engine(request: Request) -> ServiceState:
    service: ServiceState = request.app.state.service
    return service


@router.post(RELEASE_STATE_PATH, response_model=ReleaseState)
async def state(request: Request, caller: Caller) -> ReleaseState:
    return await release_state(_engine(request).engine)


@router.post(RELEASE_SCHEMA_PATH, response_model=ReleaseState)
async def schema(request: Request, body: ReleaseRequest, caller: Caller) -> ReleaseState:
    engine = _engine(request).engine
    await release_state(engine, org_id=body.org_id)
    await check_fence(engine, org_id=body.org_id, token=body.fencing_token)
    return await prepare_schema(engine, body)


def _keeper(request: Request) -> SnapshotKeeper:
    """This replica's last verified `runtime` snapshot (kept when a newer one fails)."""
    keeper: SnapshotKeeper | None = getattr(request.app.state, "catalog_snapshot", None)
    if keeper is None:
        keeper = request.app.state.catalog_snapshot = SnapshotKeeper("runtime")
    return keeper


@router.post(RELEASE_PREPARE_PATH, response_model=ReleaseState)
async def prepare(request: Request, body: ReleaseRequest, caller: Caller) -> ReleaseState:
    engine = _engine(request).engine
    await release_state(engine, org_id=body.org_id)
    await check_fence(engine, org_id=body.org_id, token=body.fencing_token)
    state = await prepare_release(engine, body, _keeper(request))
    await record_prepared(engine, org_id=body.org_id, revision=body.catalog_revision)
    heartbeat: ReplicaHeartbeat | None = getattr(request.app.state, "replica", None)
    if heartbeat is not None:
        await heartbeat.ack(body.org_id, body.catalog_revision)
    return state


@router.post(RELEASE_REPLICAS_PATH, response_model=ReplicaAcks)
async def replicas(request: Request, caller: Caller) -> ReplicaAcks:
    """Each runtime-api replica's acknowledged CatalogRevision and whether it is live."""
    live_ms: int = request.app.state.replica_live_ms
    return await replica_acks(_engine(request).engine, live_ms=live_ms)
