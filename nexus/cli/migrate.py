"""`nexus migrate` applies every service's migrations; `nexus makemigration` starts a revision."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nexus.cli.common import (
    EXIT_FAILURE,
    WAIT_RETRY_SECONDS,
    CliError,
    Subparsers,
    safe_reason,
    service_engine,
)
from nexus.contracts.roles import LogicalService
from nexus.platform.settings import Settings, load_settings

if TYPE_CHECKING:
    pass


async def migrate_services(settings: Settings, services: Sequence[LogicalService]) -> list[str]:
    from nexus.platform.migrations import upgrade_to_head

    lines = []
    for service in services:
        async with service_engine(settings, service, "nexus-migrate") as engine:
            try:
                state = await upgrade_to_head(engine, service)
            except Exception as exc:  # noqa: BLE001  (every failure becomes one clear line)
                raise CliError(
                    f"{service.value}: migration failed ({type(exc).__name__}: {safe_reason(exc)})",
                    EXIT_FAILURE,
                ) from None
        lines.append(f"{service.value}: {state.describe()}")
    return lines


async def wait_for_databases(
    settings: Settings, services: Sequence[LogicalService], wait_seconds: float
) -> None:
    """Return once every service's database answers; CliError after `wait_seconds`."""
    from nexus.platform.db.engine import ping

    deadline = time.monotonic() + wait_seconds
    for service in services:
        async with service_engine(settings, service, "nexus-migrate") as engine:
            while True:
                try:
                    await ping(engine)
                    break
                except Exception as exc:  # noqa: BLE001  (any failure to answer: try again)
                    reason = f"{type(exc).__name__}: {safe_reason(exc)}"
                    if time.monotonic() >= deadline:
                        raise CliError(
                            f"{service.value}: the database did not answer within "
                            f"{wait_seconds:g}s ({reason})",
                            EXIT_FAILURE,
                        ) from None
                    print(
                        f"nexus: waiting for the {service.value} database ({reason})",
                        file=sys.stderr,
                        flush=True,
                    )
                    await asyncio.sleep(WAIT_RETRY_SECONDS)


def cmd_migrate(args: argparse.Namespace) -> int:
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="migrate", level="warning", fmt=settings.log.log_format)
    services = [LogicalService(args.service)] if args.service else list(LogicalService)
    settings.var_dir.mkdir(parents=True, exist_ok=True)

    async def run() -> list[str]:
        if args.wait > 0:
            await wait_for_databases(settings, services, args.wait)
        return await migrate_services(settings, services)

    for line in asyncio.run(run()):
        print(line)
    return 0


def cmd_makemigration(args: argparse.Namespace) -> int:
    from nexus.platform.migrations import new_revision

    path = new_revision(LogicalService(args.service), args.message)
    print(path)
    return 0


def add_parsers(sub: Subparsers) -> None:
    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.add_argument("--service", choices=[s.value for s in LogicalService])
    migrate.add_argument(
        "--wait", type=float, default=0.0, help="seconds to wait for the database to answer"
    )
    migrate.set_defaults(handler=cmd_migrate)

    make = sub.add_parser("makemigration", help="create an empty revision (developers)")
    make.add_argument("--service", required=True, choices=[s.value for s in LogicalService])
    make.add_argument("-m", "--message", required=True)
    make.set_defaults(handler=cmd_makemigration)
