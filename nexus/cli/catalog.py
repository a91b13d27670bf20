"""`nexus catalog ...`: App packages through Catalog's release jobs, run in this process; the
built-in Apps `nexus up` installs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from nexus.cli.common import (
    EXIT_FAILURE,
    WAIT_RETRY_SECONDS,
    CliError,
    Parser,
    Subparsers,
    T,
    safe_reason,
    service_engine,
)
from nexus.contracts.roles import LogicalService, Role
from nexus.platform.settings import Settings, load_settings

if TYPE_CHECKING:
    pass

#: The built-in Apps `nexus up` installs on an org that never had them.
BUILTIN_PACKAGES = (Path(__file__).resolve().parents[1] / "apps" / "sfcrm" / "package",)


@asynccontextmanager
async def _catalog_ctx(settings: Settings) -> AsyncIterator[Any]:
    """Release jobs run in this process: the catalog database, Runtime over HTTP as the
    `catalog` workload (exactly what the catalog role does)."""
    from nexus.catalog.app import catalog_context

    async with (
        service_engine(settings, LogicalService.CATALOG, "nexus-catalog") as engine,
        httpx.AsyncClient(trust_env=False, follow_redirects=False) as client,
    ):
        yield catalog_context(settings, engine, client)


def _catalog_run(settings: Settings, job: Callable[[Any], Awaitable[T]]) -> T:
    """Run `job(ctx)`; operator-facing failures become one line (the job stays journaled)."""
    from nexus.catalog.console import ConsoleError
    from nexus.contracts.errors import NexusError
    from nexus.platform.observability import configure_logging

    configure_logging(role="catalog-cli", level="error", fmt=settings.log.log_format)

    async def run() -> T:
        async with _catalog_ctx(settings) as ctx:
            return await job(ctx)

    try:
        return asyncio.run(run())
    except ConsoleError as exc:
        raise CliError(str(exc), EXIT_FAILURE) from None
    except NexusError as exc:
        hint = " (resume with `nexus catalog resume`)" if exc.status >= 500 else ""
        raise CliError(f"{exc.code}: {exc.message}{hint}", EXIT_FAILURE) from None


def _apply_package(settings: Settings, path: Path) -> int:
    _catalog_run(settings, lambda ctx: _apply_job(ctx, path))
    return 0


async def _apply_job(ctx: Any, path: Path, *, quiet_if_installed: bool = False) -> None:
    """Apply the package at `path` and drive the job to its end, printing each state."""
    from nexus.catalog.console import drive, load_or_report
    from nexus.catalog.errors import AlreadyInstalled
    from nexus.catalog.service import start_apply

    package = load_or_report(path, sys.stderr)
    try:
        org_id, job_id = await start_apply(ctx, package=package)
    except AlreadyInstalled as exc:
        if not quiet_if_installed:
            print(exc.message)
    else:
        title = f"apply {package.manifest.app_id} {package.manifest.version}"
        await drive(ctx, org_id, job_id, sys.stdout, title=title)


def cmd_catalog_validate(args: argparse.Namespace) -> int:
    from nexus.catalog.console import ConsoleError, load_or_report

    try:
        package = load_or_report(Path(args.path), sys.stderr)
    except ConsoleError as exc:
        raise CliError(str(exc), EXIT_FAILURE) from None
    manifest = package.manifest
    print(f"{manifest.app_id} {manifest.version}: {len(package.components)} component(s), valid")
    print(f"digest {package.digest}")
    return 0


def cmd_catalog_apply(args: argparse.Namespace) -> int:
    return _apply_package(load_settings(), Path(args.path))


def cmd_catalog_rollback(args: argparse.Namespace) -> int:
    from nexus.catalog.console import drive
    from nexus.catalog.service import start_rollback

    async def job(ctx: Any) -> None:
        org_id, job_id = await start_rollback(ctx, app_id=args.app, version=args.to)
        await drive(ctx, org_id, job_id, sys.stdout, title=f"rollback {args.app} to {args.to}")

    _catalog_run(load_settings(), job)
    return 0


def cmd_catalog_uninstall(args: argparse.Namespace) -> int:
    from nexus.catalog.console import drive
    from nexus.catalog.service import start_uninstall

    async def job(ctx: Any) -> None:
        org_id, job_id = await start_uninstall(ctx, app_id=args.app)
        await drive(ctx, org_id, job_id, sys.stdout, title=f"uninstall {args.app}")

    _catalog_run(load_settings(), job)
    return 0


def cmd_catalog_resume(args: argparse.Namespace) -> int:
    from nexus.catalog.console import finish, printer
    from nexus.catalog.service import resume

    async def job(ctx: Any) -> list[Any]:
        return [finish(r, sys.stdout) for r in await resume(ctx, progress=printer(sys.stdout))]

    done = _catalog_run(load_settings(), job)
    print(f"resumed {len(done)} release job(s)")
    return 0


def cmd_catalog_status(args: argparse.Namespace) -> int:
    from nexus.catalog.console import print_status
    from nexus.catalog.service import catalog_status

    status = _catalog_run(load_settings(), lambda ctx: catalog_status(ctx.engine))
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print_status(status, sys.stdout)
    return 0


#: `nexus up` retries a built-in install this often when Runtime is briefly unavailable
#: (just started, a transient database error); the job stays journaled in between.
BUILTIN_INSTALL_ATTEMPTS = 4


def cmd_catalog_install_builtin(args: argparse.Namespace) -> int:
    """Deployments without `nexus up`: once runtime-api answers ready, install (or upgrade)
    the built-in Apps an operator has not uninstalled. Exit 1 when that fails."""
    settings = load_settings()
    _wait_until_answers(f"{settings.upstream_url(Role.RUNTIME_API.value)}/readyz", args.wait)
    install_builtin_apps(settings, strict=True)
    return 0


def _wait_until_answers(url: str, wait_seconds: float) -> None:
    """Return once `url` answers 200; CliError after `wait_seconds`."""
    deadline = time.monotonic() + wait_seconds
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            try:
                status: int | str = client.get(url).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            if status == 200:
                return
            if time.monotonic() >= deadline:
                raise CliError(
                    f"{url} did not answer 200 within {wait_seconds:g}s ({status})", EXIT_FAILURE
                )
            print(f"nexus: waiting for {url} ({status})", file=sys.stderr, flush=True)
            time.sleep(WAIT_RETRY_SECONDS)


def install_builtin_apps(settings: Settings, *, strict: bool = False) -> None:
    """Install (or upgrade) each built-in App unless an operator uninstalled it. When Runtime
    is unavailable the journaled job is resumed, a few times. `nexus up` (not `strict`):
    any other failure is one line on stderr and the stack keeps running (`nexus catalog
    ...` can finish the job later); `strict`: it is a CliError."""
    from nexus.catalog.console import finish, printer
    from nexus.catalog.service import catalog_status, resume
    from nexus.contracts.errors import NexusError

    async def install(ctx: Any) -> None:
        for attempt in range(1, BUILTIN_INSTALL_ATTEMPTS + 1):
            try:
                if attempt > 1:  # the job the failed attempt journaled
                    for result in await resume(ctx, progress=printer(sys.stdout)):
                        finish(result, sys.stdout)
                status = await catalog_status(ctx.engine)
                for path in BUILTIN_PACKAGES:
                    if status.get("installations", {}).get(path.parent.name) != "uninstalled":
                        await _apply_job(ctx, path, quiet_if_installed=True)
                return
            except NexusError as exc:
                if exc.status < 500 or attempt == BUILTIN_INSTALL_ATTEMPTS:
                    raise
                print(
                    f"nexus: installing the built-in Apps: {exc.code}, trying again "
                    f"({attempt}/{BUILTIN_INSTALL_ATTEMPTS - 1})",
                    file=sys.stderr,
                    flush=True,
                )
                await asyncio.sleep(2 * attempt)

    try:
        _catalog_run(settings, install)
    except CliError as exc:
        if strict:
            raise CliError(f"installing the built-in Apps: {exc}", EXIT_FAILURE) from None
        print(f"nexus: error: installing the built-in Apps: {exc}", file=sys.stderr, flush=True)
    except Exception as exc:  # noqa: BLE001 - the stack must keep running; one line, no URL
        if strict:
            raise CliError(
                f"installing the built-in Apps: {type(exc).__name__}: {safe_reason(exc)}",
                EXIT_FAILURE,
            ) from None
        print(
            f"nexus: error: installing the built-in Apps: {type(exc).__name__}: {safe_reason(exc)}",
            file=sys.stderr,
            flush=True,
        )


def add_parsers(sub: Subparsers) -> None:
    catalog = sub.add_parser("catalog", help="App packages: validate, install, upgrade, remove")
    csub = catalog.add_subparsers(dest="catalog_command", required=True, parser_class=Parser)
    validate = csub.add_parser("validate", help="check a package (directory or .nexuspkg)")
    validate.add_argument("path")
    validate.set_defaults(handler=cmd_catalog_validate)
    apply = csub.add_parser("apply", help="install or upgrade an App from a package")
    apply.add_argument("path")
    apply.set_defaults(handler=cmd_catalog_apply)
    rollback = csub.add_parser("rollback", help="reinstall an earlier release (a new revision)")
    rollback.add_argument("app")
    rollback.add_argument("--to", required=True, help="the version to go back to")
    rollback.set_defaults(handler=cmd_catalog_rollback)
    uninstall = csub.add_parser("uninstall", help="remove an App nothing depends on")
    uninstall.add_argument("app")
    uninstall.set_defaults(handler=cmd_catalog_uninstall)
    resume = csub.add_parser("resume", help="continue release jobs a crash interrupted")
    resume.set_defaults(handler=cmd_catalog_resume)
    status = csub.add_parser("status", help="installed Apps, revisions and recent jobs")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_catalog_status)
    builtin = csub.add_parser(
        "install-builtin", help="install the built-in Apps (deployments without `nexus up`)"
    )
    builtin.add_argument(
        "--wait", type=float, default=0.0, help="seconds to wait for runtime-api to be ready"
    )
    builtin.set_defaults(handler=cmd_catalog_install_builtin)
