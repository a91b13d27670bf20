"""The integration role's background loops (`--loops=all`): receipt router and executor.

Both run on the loops engine (`nexus-integration-loops`), never on the ingress pool, and each
has its own concurrency budget: `integration_router_concurrency` router tasks (one batch in
flight each) and one `Worker` over `integration_work` with `integration_executor_concurrency`
commands in flight (sent to AcceptCommand in batches, `executor.py`). Ingress in the same
process wakes the routers after each committed receipt batch; the executor claims a router's
new WorkItems in the router's own transaction while it has free executors, and is woken for
whatever it could not take (`Worker.claim_along`). `stop()` drains: routers finish their
batch, the worker stops claiming, gives running calls the grace period and releases the rest
(pending again).
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.ops import CheckResult
from nexus.integration.delivery.executor import CommandExecutor
from nexus.integration.delivery.models import work
from nexus.integration.routing.router import EXECUTOR_OWNER, ReceiptRouter, RouterSettings
from nexus.platform.breaker import BreakerSettings
from nexus.platform.http_client import internal_client
from nexus.platform.loops import RestartingLoop
from nexus.platform.observability import get_logger
from nexus.platform.settings import Settings
from nexus.platform.workload import WorkloadSigner
from nexus.platform.workqueue.store import WorkStore
from nexus.platform.workqueue.worker import Worker, WorkerSettings

log = get_logger(__name__)


class IntegrationLoops:
    def __init__(self, engine: AsyncEngine, settings: Settings, signer: WorkloadSigner) -> None:
        cfg = settings.integration
        self.grace_seconds = settings.core.shutdown_grace_seconds
        router_settings = RouterSettings(
            batch=cfg.integration_router_batch,
            lease_ms=cfg.integration_router_lease_ms,
            max_attempts=cfg.integration_router_max_attempts,
            idle_poll_ms=cfg.integration_router_idle_poll_ms,
            work_max_attempts=cfg.integration_executor_max_attempts,
        )
        self.routers = [
            ReceiptRouter(
                engine,
                var_dir=settings.var_dir,
                settings=router_settings,
                failpoint=settings.core.failpoint,
            )
            for _ in range(cfg.integration_router_concurrency)
        ]
        concurrency = cfg.integration_executor_concurrency
        self.client = internal_client(
            base_url=settings.upstream_url("runtime-api"),
            timeout_seconds=cfg.integration_executor_timeout_seconds,
            connections=concurrency,
        )
        self.executor = CommandExecutor(
            self.client,
            signer,
            timeout_seconds=cfg.integration_executor_timeout_seconds,
            breaker=BreakerSettings(
                failures=cfg.integration_executor_breaker_failures,
                open_ms=cfg.integration_executor_breaker_open_ms,
                open_cap_ms=cfg.integration_executor_breaker_open_cap_ms,
            ),
        )
        self.worker = Worker(
            engine,
            WorkStore(
                work,
                owner=EXECUTOR_OWNER,
                lease_ms=cfg.integration_executor_lease_ms,
                orgs=settings.core.work_orgs or None,
            ),
            self.executor,
            WorkerSettings(
                concurrency=concurrency,
                batch=cfg.integration_executor_batch,
                idle_poll_ms=cfg.integration_executor_idle_poll_ms,
                backoff_base_ms=cfg.integration_executor_backoff_base_ms,
                backoff_cap_ms=cfg.integration_executor_backoff_cap_ms,
                drain_timeout_s=self.grace_seconds,
            ),
            paused_for=self.executor.breaker.retry_in,
        )
        for router in self.routers:  # new WorkItems: the executor claims them along
            router.executor = self.worker
        self.loops = [
            RestartingLoop(f"receipt-router-{n}", router.run, on_stop=router.stop)
            for n, router in enumerate(self.routers)
        ]
        self.loops.append(
            RestartingLoop("command-executor", self.worker.run, on_stop=self.worker.stop)
        )

    def start(self) -> None:
        for loop in self.loops:
            loop.start()
        log.info("integration.loops_started", routers=len(self.routers))

    def wake_router(self) -> None:
        for router in self.routers:
            router.wake()

    async def ready(self) -> CheckResult:
        """Not ready while a router or the executor restarts after a failure."""
        checks = [await loop.ready() for loop in self.loops]
        failed = [c for c in checks if not c.ok]
        detail = "; ".join(f"{c.name}: {c.detail}" for c in failed) or "running"
        return CheckResult(name="integration-loops", ok=not failed, detail=detail)

    async def stop(self) -> None:
        """Drain: stop claiming, let running work finish within the grace period."""
        await asyncio.gather(*(loop.stop(self.grace_seconds + 5) for loop in self.loops))
        await self.executor.aclose()
        await self.client.aclose()
        log.info("integration.loops_stopped", **self.worker.stats.__dict__)
