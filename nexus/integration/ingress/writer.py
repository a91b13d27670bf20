"""Group commit of ingress receipts: many concurrent deliveries, one transaction.

Requests hand their receipt rows to `ReceiptWriter.store` and wait. A writer task takes the
first waiting row, gathers whatever else arrives within the batch window (or until the batch
is full), commits them in one transaction (`store_receipts`) and only then resolves each
request's future: every acknowledgement waits for its own commit. A failed transaction fails
every request in it with `ServiceUnavailable` (503); none is acknowledged. Statement count,
not row count, is what costs, so a batch of 100 costs about what a batch of 1 does.

How a batch reaches the database is a `ReceiptStore`. On SQLite, `SqliteReceipts` runs BEGIN
IMMEDIATE, the INSERT and COMMIT straight on a sqlite3 connection on the loop's thread
(`platform/db/sqlite/batch.SqliteWriter`):
through aiosqlite each of the ~8 driver calls of a batch is a thread round trip, and on a
loaded 2-vCPU machine those hops, not SQLite, were most of a batch's time (measured ~350 us
each). Other backends go through the async engine (`EngineStore`, one `run_sync` per batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter, Histogram
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nexus.contracts.errors import ServiceUnavailable
from nexus.integration.ingress.repository import (
    ReceiptRow,
    Stored,
    store_receipts,
    store_receipts_sqlite,
)
from nexus.platform.db.sqlite.batch import SqliteWriter
from nexus.platform.observability import get_logger

log = get_logger(__name__)

BATCH_ROWS = Histogram(
    "nexus_ingress_batch_rows",
    "Receipts committed per group-commit transaction",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
BATCH_SECONDS = Histogram(
    "nexus_ingress_batch_commit_seconds",
    "Time to write and commit one group-commit transaction",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
BATCHES = Counter(
    "nexus_ingress_batches_total", "Group-commit transactions, by outcome", ["outcome"]
)

_Pending = tuple[ReceiptRow, "asyncio.Future[Stored]"]


@dataclass
class WriterStats:
    """Counters the tests and the benchmark read (the metrics carry the same numbers)."""

    transactions: int = 0
    failed_transactions: int = 0
    rows: int = 0
    largest_batch: int = 0


class ReceiptStore(Protocol):
    async def commit(self, rows: list[ReceiptRow]) -> list[Stored]:
        """Store `rows` in one transaction; returns once it has committed."""
        ...

    async def close(self) -> None: ...


class EngineStore:
    """A batch through the async engine: one transaction, the statements via `run_sync`.

    Writers keep their connections between batches instead of returning them to the pool:
    a pool checkout pings the server and a return rolls back, two round trips per batch as
    many as the INSERT and the COMMIT. A connection that fails is closed; a batch that
    failed because its connection had dropped (a server restart) is retried once on a new
    one, which is safe because the INSERT ignores deliveries that are already stored.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._idle: list[AsyncConnection] = []

    async def commit(self, rows: list[ReceiptRow]) -> list[Stored]:
        try:
            return await self._commit(rows)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            return await self._commit(rows)

    async def _commit(self, rows: list[ReceiptRow]) -> list[Stored]:
        conn = self._idle.pop() if self._idle else await self.engine.connect()
        try:
            async with conn.begin():
                stored = await conn.run_sync(store_receipts, rows)
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        self._idle.append(conn)
        return stored

    async def close(self) -> None:
        """Closes the kept connections; the engine belongs to the caller."""
        while self._idle:
            with contextlib.suppress(Exception):
                await self._idle.pop().close()


class SqliteReceipts:
    """A batch as one transaction of the platform's SQLite writer (`SqliteWriter`: BEGIN
    IMMEDIATE, the INSERT and COMMIT straight on a kept sqlite3 connection, in this
    process's write turn), with the INSERT in its DB-API form (`store_receipts_sqlite`)."""

    def __init__(self, writer: SqliteWriter) -> None:
        self.writer = writer

    async def commit(self, rows: list[ReceiptRow]) -> list[Stored]:
        dialect = self.writer.dialect
        return await self.writer.run(lambda sqlite: store_receipts_sqlite(sqlite, dialect, rows))

    async def close(self) -> None:
        await self.writer.close()


class ReceiptWriter:
    def __init__(
        self,
        store: ReceiptStore,
        *,
        max_rows: int = 256,
        window_seconds: float = 0.0,
        writers: int = 1,
    ) -> None:
        self.store_batch = store
        self.max_rows = max_rows
        self.window_seconds = window_seconds
        self.writers = writers
        self.stats = WriterStats()
        #: Called after each committed batch (the receipt router's wake-up in this process).
        self.on_commit: Callable[[], None] | None = None
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(), name=f"ingress-writer-{n}")
            for n in range(self.writers)
        ]

    async def close(self) -> None:
        """Commit what is queued, then stop; anything left fails with 503."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self._queue.join()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._queue.empty():
            _, future = self._queue.get_nowait()
            self._queue.task_done()
            if not future.done():
                future.set_exception(ServiceUnavailable("the integration role is stopping"))
        await self.store_batch.close()

    async def store(self, row: ReceiptRow) -> Stored:
        """Queue `row`; returns once the transaction that holds it has committed."""
        if not self._tasks or all(task.done() for task in self._tasks):
            raise ServiceUnavailable("the receipt writer is not running")
        future: asyncio.Future[Stored] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((row, future))
        return await future

    async def _gather(self) -> list[_Pending]:
        batch = [await self._queue.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window_seconds
        while len(batch) < self.max_rows:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    batch.append(await self._queue.get())
            except TimeoutError:
                break
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._gather()
            await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            stored = await self.store_batch.commit([row for row, _ in batch])
        except Exception as exc:  # noqa: BLE001  (every driver failure fails the whole batch)
            self.stats.failed_transactions += 1
            BATCHES.labels("failed").inc()
            # Type only: a driver message can quote the statement's parameters (the payload).
            driver = isinstance(exc, DBAPIError | sqlite3.Error | OSError | TimeoutError)
            (log.warning if driver else log.error)(
                "ingress.batch_failed", rows=len(batch), error_type=type(exc).__name__
            )
            error = ServiceUnavailable("the receipt store is unavailable; retry later")
            for _, future in batch:
                self._queue.task_done()
                if not future.done():
                    future.set_exception(error)
            return
        self.stats.transactions += 1
        self.stats.rows += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        BATCHES.labels("committed").inc()
        BATCH_ROWS.observe(len(batch))
        BATCH_SECONDS.observe(loop.time() - started)
        if self.on_commit is not None:
            self.on_commit()
        for (_, future), result in zip(batch, stored, strict=True):
            self._queue.task_done()
            if not future.done():
                future.set_result(result)
