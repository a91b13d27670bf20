"""`nexus catalog ...`: what the operator sees of release jobs (states, progress, axes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from nexus.catalog.loader import InvalidPackage, Package, load_package
from nexus.catalog.service import STATES, CatalogContext, JobResult, run_job


class ConsoleError(Exception):
    """One line for the operator; the job (if any) is journaled and can be resumed."""


def load_or_report(path: Path, err: TextIO) -> Package:
    """The package, or every problem printed as `PATH/FILE: where: message`."""
    try:
        return load_package(path)
    except InvalidPackage as exc:
        for problem in exc.problems:
            where = problem.file if problem.file.startswith(str(path)) else f"{path}/{problem.file}"
            print(f"{where}: {problem.path}: {problem.message}", file=err)
        raise ConsoleError(f"{len(exc.problems)} problem(s); the package is invalid") from None


def printer(out: TextIO) -> Callable[[str, str], None]:
    def show(state: str, detail: str) -> None:
        step = STATES.index(state) + 1 if state in STATES else 0
        print(f"[{step}/{len(STATES)}] {state:<19} {detail}", file=out, flush=True)

    return show


async def drive(
    ctx: CatalogContext, org_id: str, job_id: str, out: TextIO, *, title: str
) -> JobResult:
    print(f"{title} (job {job_id})", file=out, flush=True)
    printer(out)("DRAFT", "journaled")
    result = await run_job(ctx, org_id=org_id, job_id=job_id, progress=printer(out))
    return finish(result, out)


def finish(result: JobResult, out: TextIO) -> JobResult:
    if result.state == "FAILED":
        raise ConsoleError(f"{result.operation} of {result.app_id} failed: {result.error}")
    for kept in result.kept_overrides:
        print(f"kept the org's customization of {kept}", file=out)
    print(
        f"{result.app_id} {result.version or ''}: {result.state}; "
        f"CatalogRevision {result.catalog_revision}, "
        f"SchemaGeneration {result.schema_generation}, SecurityEpoch {result.security_epoch}",
        file=out,
        flush=True,
    )
    return result


def print_status(status: dict[str, Any], out: TextIO) -> None:
    print(
        f"org {status['org_id']}: active CatalogRevision {status['active_revision']} "
        f"(last allocated {status['catalog_revision']})",
        file=out,
    )
    for app in status["apps"]:
        print(f"  {app['app_id']:<20} {app['version']:<12} {app['digest']}", file=out)
    if not status["apps"]:
        print("  no Apps installed", file=out)
    for job in status.get("jobs", []):
        line = f"  job {job['job_id']} {job['operation']} {job['app_id']} {job['version'] or ''}"
        line += f": {job['state']}"
        if job["catalog_revision"]:
            line += f" (revision {job['catalog_revision']})"
        if job["error"]:
            line += f" - {job['error']}"
        print(line, file=out)
