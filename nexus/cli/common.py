"""What several command groups share: the one-line error, engines on a service's database,
the stack's roles."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar

from nexus.contracts.roles import LogicalService, Role, upstream_name
from nexus.platform.settings import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker


T = TypeVar("T")


EXIT_USAGE = 2


EXIT_FAILURE = 1


READY_POLL_SECONDS = 0.25


class CliError(Exception):
    """A one-line, user-facing error; `code` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(message)


@asynccontextmanager
async def service_engine(
    settings: Settings, service: LogicalService, application_name: str
) -> AsyncIterator[AsyncEngine]:
    """An engine on one service's database for one command, disposed at the end."""
    from nexus.platform.db.engine import create_engine

    engine = create_engine(
        settings.database_url(service),
        application_name=application_name,
        sqlite_busy_timeout_ms=settings.db.sqlite_busy_timeout_ms,
        connect_timeout_seconds=settings.db.db_connect_timeout_seconds,
        idle_write_transaction_timeout_seconds=settings.db.db_idle_write_transaction_timeout_seconds,
    )
    try:
        yield engine
    finally:
        await engine.dispose()


#: The subcommand table each group adds its parsers to.
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def safe_reason(exc: Exception) -> str:
    """The first line of a driver error; driver messages never contain the password."""
    return str(exc).splitlines()[0][:200] if str(exc) else ""


#: How often `--wait` commands try again while what they need does not answer yet.
WAIT_RETRY_SECONDS = 2.0


#: Start order of `nexus up`; the gateway starts last and stops first.
STACK: tuple[tuple[Role, str | None], ...] = (
    (Role.RUNTIME_API, None),
    (Role.RUNTIME_WORKER, None),
    (Role.CATALOG, None),
    (Role.INTEGRATION, None),
    (Role.APP, "sfcrm"),
    (Role.GATEWAY, None),
)


def child_name(role: Role, app: str | None) -> str:
    return upstream_name(role, app).replace(":", "-")


@asynccontextmanager
async def runtime_sessions(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    from nexus.platform.db.engine import session_factory

    async with service_engine(settings, LogicalService.RUNTIME, "nexus-admin") as engine:
        yield session_factory(engine)


def run_admin(args: argparse.Namespace, action: Callable[..., Awaitable[T]], **kwargs: Any) -> T:
    from nexus.contracts.errors import NexusError
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="admin", level="warning", fmt=settings.log.log_format)

    async def run() -> T:
        async with runtime_sessions(settings) as sessions:
            return await action(sessions, **kwargs)

    try:
        return asyncio.run(run())
    except NexusError as exc:
        raise CliError(exc.message, EXIT_FAILURE) from None


async def first_org_id(engine: AsyncEngine) -> str:
    from nexus.identity.api import Directory
    from nexus.platform.db.engine import session_factory, unit_of_work

    async with unit_of_work(session_factory(engine), readonly=True) as session:
        org = await Directory(session).first_org()
    if org is None:
        raise CliError("no org yet: run `nexus up` or `nexus admin bootstrap` first", EXIT_FAILURE)
    return str(org["org_id"])


def port_number(raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {raw!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range 1-65535")
    return port
