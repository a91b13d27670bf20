"""Runtime's internal HTTP API (`/internal/v1/runtime/...`): thin, one use case per call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.errors import BadRequest, Forbidden
from nexus.contracts.identity import TrustedCall
from nexus.identity.endpoints import identity_state, internal_call
from nexus.identity.repository import IdentityRepository
from nexus.platform.db import unit_of_work
from nexus.platform.service_app import ServiceState
from nexus.runtime.metadata.definitions import InvalidMetadata
from nexus.runtime.metadata.service import apply_metadata

router = APIRouter(prefix="/internal/v1/runtime")


class MetadataApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    objects: list[dict[str, Any]] = Field(default_factory=list, max_length=200)


class MetadataApplyResponse(BaseModel):
    apply_id: str
    state: str
    versions: list[dict[str, Any]]
    unchanged: list[str]
    schema_generation: int
    metadata_revision: int


async def _require_admin(request: Request, caller: TrustedCall) -> None:
    """Metadata administration needs a System Administrator (decided here, in Runtime)."""
    sessions = identity_state(request).sessions
    async with unit_of_work(sessions, readonly=True) as session:
        user = await IdentityRepository(session).user(caller.org_id, caller.user_id)
    if user is None or not user["is_admin"]:
        raise Forbidden(
            "metadata administration needs a System Administrator", code="INSUFFICIENT_ACCESS"
        )


@router.post("/metadata/apply", response_model=MetadataApplyResponse)
async def metadata_apply(
    request: Request,
    body: MetadataApplyRequest,
    caller: Annotated[TrustedCall, Depends(internal_call("runtime.metadata.apply"))],
) -> MetadataApplyResponse:
    await _require_admin(request, caller)
    service: ServiceState = request.app.state.service
    try:
        result = await apply_metadata(service.engine, org_id=caller.org_id, raw=body.model_dump())
    except InvalidMetadata as exc:
        raise BadRequest(
            "the metadata batch is invalid; nothing was applied",
            code="INVALID_METADATA",
            fields={p.path: p.message for p in exc.problems[:50]},
        ) from None
    return MetadataApplyResponse(
        apply_id=result.apply_id,
        state=result.state,
        versions=result.versions,
        unchanged=result.unchanged,
        schema_generation=result.schema_generation,
        metadata_revision=result.metadata_revision,
    )
