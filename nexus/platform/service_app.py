"""The skeleton of a role that owns a logical database: engine lifecycle and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import LogicalService, Role
from nexus.platform.db.engine import create_engine, describe_backend, ping, session_factory
from nexus.platform.http import OpsInfo, ReadinessCheck, RoleApp, create_role_app
from nexus.platform.interpreter import tuned_for_serving
from nexus.platform.migrations import migration_state
from nexus.platform.settings import Settings

READINESS_TIMEOUT_SECONDS = 2.0


def role_engine(
    settings: Settings,
    service: LogicalService,
    *,
    name: str,
    pool_size: int,
    sqlite_on_loop: bool = False,
) -> AsyncEngine:
    """An engine on `service`'s database with the process's database settings, labelled
    `name` (the connection's application name). `sqlite_on_loop`: see `db.create_engine`."""
    return create_engine(
        settings.database_url(service),
        application_name=name,
        pool_size=pool_size,
        connect_timeout_seconds=settings.db.db_connect_timeout_seconds,
        idle_write_transaction_timeout_seconds=settings.db.db_idle_write_transaction_timeout_seconds,
        sqlite_busy_timeout_ms=settings.db.sqlite_busy_timeout_ms,
        sqlite_on_loop=sqlite_on_loop,
        sqlite_synchronous=settings.db.sqlite_synchronous,
    )


class ServiceState:
    """What a database-owning role holds for its lifetime (in `app.state.service`)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(engine)


def create_service_app(
    *,
    settings: Settings,
    role: Role,
    service: LogicalService,
    capabilities: Sequence[str],
    on_start: Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]] | None = None,
    readiness_checks: Sequence[ReadinessCheck] = (),
) -> RoleApp:
    """A role app whose /readyz requires its database reachable and its migrations at head
    (and every one of the role's own `readiness_checks`).

    `on_start` wraps the role's own start-up and shutdown inside the engine's lifetime.
    """

    holder: dict[str, ServiceState] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = role_engine(
            settings, service, name=f"nexus-{role.value}", pool_size=settings.db.db_pool_size
        )
        app.state.service = holder["state"] = ServiceState(engine)
        try:
            if on_start is None:
                with tuned_for_serving():
                    yield
            else:
                async with on_start(app, holder["state"]):
                    with tuned_for_serving():
                        yield
        finally:
            holder.clear()
            await engine.dispose()

    async def database_ready() -> CheckResult:
        state = holder.get("state")
        name = f"database:{service.value}"
        if state is None:
            return CheckResult(name=name, ok=False, detail="starting")
        try:
            async with asyncio.timeout(READINESS_TIMEOUT_SECONDS):
                await ping(state.engine)
                migrations = await migration_state(state.engine, service)
        except TimeoutError:
            return CheckResult(name=name, ok=False, detail="database did not answer in time")
        except Exception as exc:  # noqa: BLE001  (any driver failure means not ready)
            return CheckResult(name=name, ok=False, detail=f"unreachable ({type(exc).__name__})")
        backend = describe_backend(state.engine)
        if not migrations.at_head:
            return CheckResult(
                name=name, ok=False, detail=f"{backend}: schema behind, {migrations.describe()}"
            )
        return CheckResult(name=name, ok=True, detail=f"{backend}: {migrations.describe()}")

    info = OpsInfo(
        role=role.value,
        capabilities=capabilities,
        readiness_checks=[database_ready, *readiness_checks],
    )
    return create_role_app(info, lifespan=lifespan)
