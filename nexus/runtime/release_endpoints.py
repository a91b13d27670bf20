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
    RELEASE_SCHEMA_PATH,
    RELEASE_STATE_PATH,
    RELEASES_CAPABILITY,
    ReleaseRequest,
    ReleaseState,
    SnapshotKeeper,
)
from nexus.identity.endpoints import WorkloadCall, workload_call
from nexus.platform.service_app import ServiceState
from nexus.runtime.releases import prepare_release, prepare_schema, release_state

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
    return await prepare_schema(_engine(request).engine, body)


def _keeper(request: Request) -> SnapshotKeeper:
    """This replica's last verified `runtime` snapshot (kept when a newer one fails)."""
    keeper: SnapshotKeeper | None = getattr(request.app.state, "catalog_snapshot", None)
    if keeper is None:
        keeper = request.app.state.catalog_snapshot = SnapshotKeeper("runtime")
    return keeper


@router.post(RELEASE_PREPARE_PATH, response_model=ReleaseState)
async def prepare(request: Request, body: ReleaseRequest, caller: Caller) -> ReleaseState:
    return await prepare_release(_engine(request).engine, body, _keeper(request))
