"""`nexus work stats|transfer`: the work queues of integration and Runtime."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from nexus.cli.common import (
    EXIT_FAILURE,
    CliError,
    Parser,
    Subparsers,
    safe_reason,
    service_engine,
)
from nexus.contracts.roles import LogicalService
from nexus.platform.settings import load_settings

if TYPE_CHECKING:
    pass


def _work_tables(service: LogicalService) -> dict[str, Any]:
    """The work-engine table sets a service keeps, by name."""
    if service is LogicalService.INTEGRATION:
        from nexus.integration.delivery.models import work

        return {"integration": work}
    if service is LogicalService.RUNTIME:
        from nexus.runtime.inbox.models import inbox
        from nexus.runtime.outbox.models import outbox

        return {"inbox": inbox, "outbox": outbox}
    raise CliError(f"{service.value} keeps no work queues")


def cmd_work_stats(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from nexus.platform.db.engine import reading
    from nexus.platform.observability import configure_logging
    from nexus.platform.workqueue.operate import list_parked
    from nexus.platform.workqueue.stats import ALL_STATES, OPEN_STATES, queue_stats

    settings = load_settings()
    configure_logging(role="work", level="warning", fmt=settings.log.log_format)
    services = (
        [LogicalService(args.service)]
        if args.service
        else [LogicalService.INTEGRATION, LogicalService.RUNTIME]
    )

    async def run() -> list[str]:
        lines = [f"{'QUEUE':12} {'FAMILY':40} {'CLASS':12} {'STATE':16} {'COUNT':>8} OLDEST"]
        halted = []
        for service in services:
            async with (
                service_engine(settings, service, "nexus-work") as engine,
                reading(engine) as conn,
            ):
                for name, tables in _work_tables(service).items():
                    states = ALL_STATES if args.all else OPEN_STATES
                    for c in (await queue_stats(conn, tables, states=states)).counts:
                        if c.count or args.all:
                            age = (
                                "" if c.oldest_age_ms is None else f"{c.oldest_age_ms / 1000:.1f}s"
                            )
                            lines.append(
                                f"{name:12} {c.family:40} {c.queue_class:12} {c.state:16} "
                                f"{c.count:>8} {age}".rstrip()
                            )
                    families = tables.families
                    orgs = select(families.c.org_id).distinct().order_by(families.c.org_id)
                    for (org_id,) in list(await conn.execute(orgs)):  # the deployment's view
                        halted += [
                            f"{name}: lane {p.family} {p.lane_key} halted by {p.id} ({p.state})"
                            for p in await list_parked(
                                conn, tables, org_id=org_id, halting_only=True, limit=50
                            )
                        ]
        return lines + halted

    try:
        lines = asyncio.run(run())
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001  (one line, never the URL)
        raise CliError(
            f"cannot read the work queues ({type(exc).__name__}: {safe_reason(exc)}); "
            "run `nexus migrate` first?",
            EXIT_FAILURE,
        ) from None
    for line in lines:
        print(line)
    return 0


def cmd_work_transfer(args: argparse.Namespace) -> int:
    from nexus.contracts.errors import Conflict
    from nexus.platform.observability import configure_logging
    from nexus.platform.workqueue.families import TransferBlocked, transfer

    settings = load_settings()
    configure_logging(role="work", level="warning", fmt=settings.log.log_format)
    service = LogicalService(args.service)

    async def run() -> list[str]:
        moved = []
        async with service_engine(settings, service, "nexus-work") as engine:
            for name, tables in _work_tables(service).items():
                try:
                    epoch = await transfer(
                        engine, tables, args.family, args.to, timeout_s=args.timeout
                    )
                except TransferBlocked:
                    raise
                except Conflict as exc:
                    if exc.code == "NOT_FOUND":
                        continue
                    raise CliError(exc.message, EXIT_FAILURE) from None
                moved.append(
                    f"{name}: work family {args.family} is owned by {args.to} "
                    f"(ownership epoch {epoch})"
                )
        if not moved:
            raise CliError(f"no work family {args.family!r} in {service.value}", EXIT_FAILURE)
        return moved

    try:
        lines = asyncio.run(run())
    except TransferBlocked as exc:
        for item in exc.blocking:
            print(f"blocking: {item}")
        raise CliError(exc.message, EXIT_FAILURE) from None
    for line in lines:
        print(line)
    return 0


def add_parsers(sub: Subparsers) -> None:
    work = sub.add_parser("work", help="work queues: statistics, family ownership")
    wsub = work.add_subparsers(dest="work_command", required=True, parser_class=Parser)
    services = ["integration", "runtime"]
    stats = wsub.add_parser("stats", help="items per queue and state; halted lanes")
    stats.add_argument("--service", choices=services, help="default: both")
    stats.add_argument("--all", action="store_true", help="finished states and empty ones too")
    stats.set_defaults(handler=cmd_work_stats)
    move = wsub.add_parser("transfer", help="move a work family to another owner")
    move.add_argument("--service", choices=services, required=True)
    move.add_argument("--family", required=True)
    move.add_argument("--to", required=True, help="the new owner")
    move.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for live leases (60)"
    )
    move.set_defaults(handler=cmd_work_transfer)
