"""Catalog's HTTP surface.

- `GET /internal/v1/catalog/snapshot?consumer=runtime|integration|app`: the consumer's
  projection of the org's active revision with its checksum; the caller presents its workload
  token and may read only its own consumer's projection.
- `/admin/v1/catalog/...`: status, validate, apply, rollback, uninstall, resume for the
  console; every request is authorized by Runtime (a System Administrator).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from nexus.catalog.loader import InvalidPackage, Package, parse_package
from nexus.catalog.repository import CatalogRepository
from nexus.catalog.service import (
    CatalogContext,
    catalog_status,
    read_snapshot,
    resume,
    run_job,
    start_apply,
    start_rollback,
    start_uninstall,
)
from nexus.contracts.catalog import SNAPSHOT_PATH, Consumer, Snapshot
from nexus.contracts.errors import BadRequest, Forbidden, NotFound, Unauthorized
from nexus.contracts.roles import CATALOG_AUDIENCE
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.workload import WORKLOAD_HEADER, WorkloadTokenInvalid, verify_workload_token

ADMIN_PREFIX = "/admin/v1/catalog"
#: which workload may read which consumer's projection
READERS: dict[str, Consumer] = {
    "runtime-api": "runtime",
    "runtime-worker": "runtime",
    "integration": "integration",
    "app-sfcrm": "app",
}
MAX_FILES = 500

router = APIRouter()


def _ctx(request: Request) -> CatalogContext:
    ctx: CatalogContext = request.app.state.catalog
    return ctx


@router.get(SNAPSHOT_PATH, response_model=Snapshot)
async def snapshot(
    request: Request,
    consumer: Annotated[Consumer, Query()],
    workload: Annotated[str | None, Header(alias=WORKLOAD_HEADER)] = None,
) -> Snapshot:
    try:
        name = verify_workload_token(
            workload, request.app.state.workload_keys, audience=CATALOG_AUDIENCE
        )
    except WorkloadTokenInvalid:
        raise Unauthorized("workload authentication failed", code="INVALID_WORKLOAD") from None
    if READERS.get(name) != consumer:
        raise Forbidden(f"workload {name} may not read the {consumer} snapshot")
    found = await read_snapshot(_ctx(request).engine, consumer=consumer)
    if found is None:
        raise NotFound("no release is active yet", code="NO_ACTIVE_RELEASE")
    return found


# ---------------------------------------------------------------------------- admin API


class PackageBody(BaseModel):
    """A package as its files (relative path -> YAML text), as the console uploads it."""

    model_config = ConfigDict(extra="forbid")

    files: dict[str, Annotated[str, Field(max_length=1_000_000)]] = Field(max_length=MAX_FILES)


class UninstallBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    app_id: Annotated[str, Field(min_length=1, max_length=40)]


class RollbackBody(UninstallBody):
    version: Annotated[str, Field(min_length=1, max_length=64)]


async def operator(request: Request, authorization: Annotated[str | None, Header()] = None) -> Any:
    return await request.app.state.operator_gate.operator(authorization)


Operator = Annotated[Any, Depends(operator)]


def _parse(body: PackageBody) -> Package:
    try:
        return parse_package({k: v.encode("utf-8") for k, v in body.files.items()})
    except InvalidPackage as exc:
        raise BadRequest(
            f"the package is invalid ({len(exc.problems)} problem(s))",
            code="INVALID_PACKAGE",
            fields={f"{p.file}: {p.path}": p.message for p in exc.problems[:100]},
        ) from None


async def _journaled(request: Request, org_id: str, job_id: str) -> dict[str, Any]:
    result = await run_job(_ctx(request), org_id=org_id, job_id=job_id)
    async with unit_of_work(session_factory(_ctx(request).engine), readonly=True) as session:
        steps = await CatalogRepository(session).steps(org_id, job_id)
    return {
        **asdict(result),
        "steps": [{"state": s["state"], "detail": s["detail"]} for s in steps],
    }


@router.get(f"{ADMIN_PREFIX}/status")
async def status(request: Request, _operator: Operator) -> dict[str, Any]:
    return await catalog_status(_ctx(request).engine)


@router.post(f"{ADMIN_PREFIX}/validate")
async def validate(body: PackageBody, _operator: Operator) -> dict[str, Any]:
    package = _parse(body)
    return {
        "app_id": package.manifest.app_id,
        "version": package.manifest.version,
        "digest": package.digest,
        "components": len(package.components),
    }


@router.post(f"{ADMIN_PREFIX}/apply")
async def apply(request: Request, body: PackageBody, _operator: Operator) -> dict[str, Any]:
    org_id, job_id = await start_apply(_ctx(request), package=_parse(body))
    return await _journaled(request, org_id, job_id)


@router.post(f"{ADMIN_PREFIX}/rollback")
async def rollback(request: Request, body: RollbackBody, _operator: Operator) -> dict[str, Any]:
    org_id, job_id = await start_rollback(_ctx(request), app_id=body.app_id, version=body.version)
    return await _journaled(request, org_id, job_id)


@router.post(f"{ADMIN_PREFIX}/uninstall")
async def uninstall(request: Request, body: UninstallBody, _operator: Operator) -> dict[str, Any]:
    org_id, job_id = await start_uninstall(_ctx(request), app_id=body.app_id)
    return await _journaled(request, org_id, job_id)


@router.post(f"{ADMIN_PREFIX}/resume")
async def resume_jobs(request: Request, _operator: Operator) -> list[dict[str, Any]]:
    return [asdict(r) for r in await resume(_ctx(request))]
