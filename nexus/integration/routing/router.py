"""The receipt router: `received` receipts become immutable events and WorkItems, once.

A batch whose bodies are all in their rows (snapshots; the usual case) is ONE transaction:
it claims up to `batch` due receipts of one org under a fresh token (`claim_receipts`, a CAS
on the claimable predicate, so two routers never take the same receipt), checks each body
against its payload hash, reads the CURRENT active routes, maps each receipt
(`mapping.map_delivery`) and writes the events (insert-or-ignore on ids derived from
(receipt, ordinal)), the WorkItems (deterministic ids, skipped when the `event_work` link
exists), the links, and the receipts' new status. A batch with a body kept as a file
(`body_ref`) is two: the claim commits, the files are read outside any transaction, then the
materialization renews every lease of the batch under the token (a lost lease rolls it back;
the receipts are retried while still held) and writes as above. Either way a crash anywhere
re-runs with no duplicates: before the commit nothing is written (or the lease expires);
after it the receipt is no longer `received`.

Outcomes per receipt: `materialized` (with its event ids); `failed` when retrying cannot help
(the route is gone, the body is not JSON, a key pointer finds nothing); retried with backoff
when the failure may pass (the stored body is unreadable, the transaction failed), until
`max_attempts` claims, then `failed`. A batch whose transaction fails is retried one receipt
per transaction, so one bad row cannot hold the others back.

The executor of this process claims the new WorkItems in the same transaction when it has
free executors (`Worker.claim_along`, ADR 0059): they start the moment it commits, instead of
after the executor's next claim round; whatever it could not take, its poller claims.

Events of a route applied with `nexus integration apply-routes` have no Catalog pack yet: the
installed pack id is `routes:<connector>` and the pack generation is the route version.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError
from pydantic_core import to_json
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nexus.contracts.commands import AcceptCommandRequest
from nexus.integration.delivery.models import work as work_tables
from nexus.integration.ingress.bodies import read_body
from nexus.integration.routing.mapping import (
    MappingFailed,
    map_delivery,
    needs_document,
    parse_json,
)
from nexus.integration.routing.router_repository import (
    FIRST_EVENT,
    ClaimedReceipt,
    claim_receipts,
    current_routes,
    due_receipts,
    fence_receipts,
    held_receipts,
    insert_events,
    link_work,
    linked_work,
    mark_failed,
    mark_materialized,
    mark_retry,
    receipt_orgs,
)
from nexus.integration.routing.routes import ActiveRoute
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.failpoints import crash_at
from nexus.platform.ids import fit
from nexus.platform.json_text import compact_json
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.workqueue.keys import family_key
from nexus.platform.workqueue.store import NewItem, QueuePolicy, WorkStore, new_token
from nexus.platform.workqueue.worker import Along, Worker, backoff_ms

log = get_logger(__name__)

ROUTED = Counter(
    "nexus_integration_router_receipts_total",
    "Receipts the router finished or postponed, by outcome (materialized|failed|retried|lost)",
    ["outcome"],
)

#: The work-family owner the executor claims as (one logical owner for every process).
EXECUTOR_OWNER = "integration"
#: The one kind of work an event becomes so far: deliver its command to Runtime.
WORK_TYPE = "command"
FAILPOINT_AFTER_CLAIM = "router.after_claim"
FAILPOINT_BEFORE_COMMIT = "router.before_commit"
ORGS_REFRESH_SECONDS = 5.0


def installed_pack_id(connector: str) -> str:
    """The pack id of routes applied from a route file (no Catalog pack yet)."""
    return fit(f"routes:{connector}", 64, digest=8)


def work_family(org_id: str, pack: str) -> str:
    """The work family of a pack's deliveries in one org (the org leads every work key)."""
    return family_key(org_id, pack)


def queue_class(route_key: str) -> str:
    """Each route is its own queue class (fairness between routes of one connector)."""
    return fit(route_key, 32, digest=8)


def event_id(receipt_id: str, ordinal: int = 0) -> str:
    """A receipt's event: `-0` when the router made it; an operator's re-route from the
    receipt (docs/adr/0044) numbers the next ones."""
    return receipt_id + (FIRST_EVENT if ordinal == 0 else f"-{ordinal}")


def work_id(org_id: str, received_at_ms: int, event: str, work_type: str = WORK_TYPE) -> str:
    """Deterministic (a re-run derives the same id) and ordered by acceptance time."""
    digest = hashlib.sha256(f"{org_id}/{event}/{work_type}".encode()).hexdigest()
    return f"{received_at_ms:012x}{digest[:20]}"


def command_payload(request: AcceptCommandRequest, command_json: str) -> str:
    """`request.model_dump_json()`, byte for byte, around the command's JSON the event row
    already holds: the command is serialised once, its envelope's strings by pydantic's own
    encoder (tests/unit/test_route_mapping.py compares the two)."""
    return (
        f'{{"org_id":{_json_text(request.org_id)},"message_id":{_json_text(request.message_id)},'
        f'"command":{command_json},"correlation":{_json_text(request.correlation)}}}'
    )


def _json_text(value: object) -> str:
    return to_json(value).decode()


@dataclass(frozen=True)
class Materialized:
    """One receipt mapped by a route: its event row and the WorkItem carrying its command."""

    event: dict[str, Any]
    item: NewItem | None


def map_receipt(
    receipt: ClaimedReceipt, body: bytes, route: ActiveRoute, *, ordinal: int = 0
) -> Materialized:
    """Map `body` with `route` into event `ordinal` of the receipt; MappingFailed (its
    sanitized reason) when the route cannot map it."""
    rid = receipt.receipt_id
    declaration = route.declaration
    document = parse_json(body) if needs_document(declaration) else None
    mapped = map_delivery(declaration, document, receipt.correlation)
    event = event_id(rid, ordinal)
    request = None
    if mapped.command is not None:
        try:
            request = AcceptCommandRequest(
                org_id=receipt.org_id,
                message_id=work_id(receipt.org_id, receipt.received_at_ms, event),
                command=mapped.command,
                correlation={
                    "event_id": event,
                    "receipt_id": rid,
                    "delivery_id": receipt.provider_delivery_id,
                },
            )
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"])
            raise MappingFailed(f"the command for Runtime is invalid at {where}") from None
    pack = installed_pack_id(receipt.connector)
    command_json = item = None
    if request is not None:
        command_json = request.command.model_dump_json()  # once: the row's and the payload's
        item = NewItem(
            family=work_family(receipt.org_id, pack),
            queue_class=queue_class(receipt.route_key),
            payload=command_payload(request, command_json),
            id=request.message_id,
            lane_key=mapped.lane_key,
            target_key=mapped.target_key,
        )
    row = {
        "org_id": receipt.org_id,
        "event_id": event,
        "receipt_id": rid,
        "ordinal": ordinal,
        "installed_pack_id": pack,
        "pack_generation": route.version,
        "connector": receipt.connector,
        "route_key": receipt.route_key,
        "route_version": route.version,
        "event_kind": receipt.event_kind,
        "source_object_kind": mapped.source_kind,
        "source_object_id": mapped.source_id,
        "idempotency_key": fit(
            f"{receipt.connector}:{receipt.route_key}:{receipt.provider_delivery_id}:{ordinal}",
            191,
        ),
        "delivery_seq": receipt.received_at_ms,
        "payload_sha256": receipt.payload_sha256,
        "parse_outcome": "parsed" if request is not None else "no_command",
        "command": command_json,
        "correlation": compact_json({"receipt_id": rid} | receipt.correlation),
    }
    return Materialized(row, item)


async def enqueue_work(
    conn: AsyncConnection,
    store: WorkStore,
    org_id: str,
    work: list[tuple[str, NewItem]],
    *,
    now_ms: int,
    policy: QueuePolicy,
    known: set[tuple[str, str]],
) -> set[tuple[str, str]]:
    """WorkItems and their event links, skipping events that have theirs already; queues not
    in `known` are ensured first. Returns the queues it ensured."""
    existing = await linked_work(conn, org_id=org_id, event_ids=[e for e, _ in work])
    work = [(e, item) for e, item in work if (e, WORK_TYPE) not in existing]
    if not work:
        return set()
    queues = {(item.family, item.queue_class) for _, item in work} - known
    for family, queue in sorted(queues):
        await store.ensure_queue(conn, family, queue, owner=EXECUTOR_OWNER, policy=policy)
    await store.enqueue(conn, [item for _, item in work])
    await link_work(
        conn,
        [
            {"org_id": org_id, "event_id": e, "work_type": WORK_TYPE, "work_id": item.id}
            for e, item in work
        ],
        now_ms=now_ms,
    )
    return queues


@dataclass(frozen=True)
class RouterSettings:
    batch: int = 64
    lease_ms: int = 30_000
    max_attempts: int = 8
    idle_poll_ms: int = 200
    backoff_base_ms: int = 1_000
    backoff_cap_ms: int = 300_000
    work_max_attempts: int = 10  # for the work queues the router creates


@dataclass
class RouterStats:
    batches: int = 0
    materialized: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0


@dataclass(frozen=True)
class _Loaded:
    """A claimed receipt with its body, or why the body could not be had."""

    receipt: ClaimedReceipt
    body: bytes | None = None
    transient: str | None = None
    terminal: str | None = None


@dataclass
class _Writes:
    """Everything one materialization transaction writes."""

    events: list[dict[str, Any]] = field(default_factory=list)
    work: list[tuple[str, NewItem]] = field(default_factory=list)  # (event id, item)
    materialized: list[str] = field(default_factory=list)  # receipt ids
    failed: dict[str, str] = field(default_factory=dict)
    retries: dict[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimedBatch:
    org_id: str
    token: str
    receipts: list[ClaimedReceipt]


class _LeaseLost(Exception):
    pass


@dataclass
class _Transaction:
    """A materialization transaction's connection, and what the executor claimed along."""

    conn: AsyncConnection
    along: Along | None = None


class ReceiptRouter:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        var_dir: Path,
        settings: RouterSettings | None = None,
        owner: str | None = None,
        failpoint: str | None = None,
    ) -> None:
        self.engine = engine
        self.var_dir = var_dir.resolve()
        self.settings = settings or RouterSettings()
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.failpoint = failpoint
        self.stats = RouterStats()
        self.work = WorkStore(work_tables, owner=EXECUTOR_OWNER)
        self._queues: set[tuple[str, str]] = set()
        self._orgs: list[str] = []
        self._orgs_read_at = -ORGS_REFRESH_SECONDS
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        #: This process's executor: it claims new WorkItems along (set by IntegrationLoops).
        self.executor: Worker | None = None

    # ------------------------------------------------------------------ loop
    def wake(self) -> None:
        """New receipts were committed: look now instead of at the next idle poll."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Route until `stop()`; a batch in progress finishes (or its leases expire)."""
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                handled = await self.step()
            except Exception as exc:  # noqa: BLE001 - the database is down or busy: back off
                unless_cancelled()
                log.warning("router.step_failed", error_type=type(exc).__name__)
                await self._sleep(1.0)
                continue
            if handled == 0:
                await self._sleep(self.settings.idle_poll_ms / 1000)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def step(self) -> int:
        """One batch per org; returns how many receipts were claimed."""
        handled = 0
        for org_id in await self._org_ids():
            if self._stopping.is_set():
                break
            handled += await self.route_batch(org_id)
        return handled

    async def _org_ids(self) -> list[str]:
        if time.monotonic() - self._orgs_read_at >= ORGS_REFRESH_SECONDS:
            async with reading(self.engine) as conn:
                self._orgs = await receipt_orgs(conn)
            self._orgs_read_at = time.monotonic()
        return self._orgs

    # ------------------------------------------------------------------ one batch
    async def route_batch(self, org_id: str) -> int:
        """Claim one batch of the org's due receipts and materialize it: in the claim's own
        transaction when every body is in its row (nothing to read from disk while holding
        the write lock), else in a second one after the bodies were read."""
        async with reading(self.engine) as conn:
            ids = await due_receipts(conn, org_id=org_id, limit=self.settings.batch)
        if not ids:
            return 0
        token = new_token()
        try:
            async with self._transaction() as tx:
                claimed = await self._claim(tx.conn, org_id, ids, token)
                if not claimed:
                    return 0
                if any(receipt.body_snapshot is None for receipt in claimed):
                    batch = ClaimedBatch(org_id, token, claimed)
                else:
                    batch = None
                    self._crash_at(FAILPOINT_AFTER_CLAIM)
                    loaded = [self._loaded(r, bytes(r.body_snapshot or b"")) for r in claimed]
                    written = await self._write(tx, org_id, token, loaded)
        except Exception as exc:
            if _unavailable(exc):
                raise
            # a row the database refused: the claim went with it; the two-transaction path
            # below retries the batch one receipt at a time
            log.warning("router.batch_failed", receipts=len(ids), error_type=type(exc).__name__)
            fallback = await self.claim(org_id, ids)
            if fallback is None:
                return 0
            await self.materialize(fallback)
            return len(fallback.receipts)
        if batch is not None:
            self._crash_at(FAILPOINT_AFTER_CLAIM)
            await self.materialize(batch)
            return len(batch.receipts)
        self._written(written)
        self.stats.batches += 1
        return len(claimed)

    async def claim(self, org_id: str, ids: list[str] | None = None) -> ClaimedBatch | None:
        """Lease up to `batch` due receipts under a fresh token (committed at return)."""
        if ids is None:
            async with reading(self.engine) as conn:
                ids = await due_receipts(conn, org_id=org_id, limit=self.settings.batch)
        if not ids:
            return None
        token = new_token()
        async with self.engine.begin() as conn:
            claimed = await self._claim(conn, org_id, ids, token)
        return ClaimedBatch(org_id, token, claimed) if claimed else None

    async def _claim(
        self, conn: AsyncConnection, org_id: str, ids: list[str], token: str
    ) -> list[ClaimedReceipt]:
        return await claim_receipts(
            conn,
            org_id=org_id,
            ids=ids,
            token=token,
            owner=self.owner,
            lease_ms=self.settings.lease_ms,
        )

    async def materialize(self, batch: ClaimedBatch) -> None:
        """Read the bodies and write the batch's outcome in one transaction fenced by its
        token; receipts whose lease was lost meanwhile are left alone (nothing recorded)."""
        loaded = [await self._load(receipt) for receipt in batch.receipts]
        await self._materialize(batch.org_id, batch.token, loaded, split=True)
        self.stats.batches += 1

    async def _load(self, receipt: ClaimedReceipt) -> _Loaded:
        if receipt.body_snapshot is not None:
            body = bytes(receipt.body_snapshot)
        elif receipt.body_ref is not None:
            try:
                body = await asyncio.to_thread(read_body, self.var_dir, receipt.body_ref)
            except OSError as exc:
                return _Loaded(receipt, transient=f"the stored body is unreadable ({exc.strerror})")
            except ValueError as exc:
                return _Loaded(receipt, terminal=str(exc))
        else:
            return _Loaded(receipt, terminal="the receipt has no stored body")
        return self._loaded(receipt, body)

    @staticmethod
    def _loaded(receipt: ClaimedReceipt, body: bytes) -> _Loaded:
        if hashlib.sha256(body).hexdigest() != receipt.payload_sha256:
            return _Loaded(receipt, terminal="the stored body does not match its payload hash")
        return _Loaded(receipt, body=body)

    async def _materialize(
        self, org_id: str, token: str, batch: list[_Loaded], *, split: bool
    ) -> None:
        for _ in range(2):
            try:
                await self._commit(org_id, token, batch)
                return
            except _LeaseLost:
                async with reading(self.engine) as conn:
                    ids = [b.receipt.receipt_id for b in batch]
                    held = await held_receipts(conn, org_id=org_id, token=token, ids=ids)
                self._count_lost(len(batch) - len(held))
                batch = [b for b in batch if b.receipt.receipt_id in held]
                if not batch:
                    return
            except Exception as exc:
                if _unavailable(exc):  # the database is away: the leases expire, then retry
                    log.warning("router.database_unavailable", error_type=type(exc).__name__)
                    raise
                if split and len(batch) > 1:  # a row the database refused: one at a time
                    log.warning(
                        "router.batch_failed", receipts=len(batch), error_type=type(exc).__name__
                    )
                    for one in batch:
                        await self._materialize(org_id, token, [one], split=False)
                else:
                    await self._retry_later(org_id, token, batch, type(exc).__name__)
                return
        self._count_lost(len(batch))  # lost twice: another router holds them now

    def _count_lost(self, lost: int) -> None:
        if lost > 0:
            self.stats.lost += lost
            ROUTED.labels("lost").inc(lost)
            log.warning("router.lease_lost", receipts=lost)

    async def _retry_later(
        self, org_id: str, token: str, batch: list[_Loaded], error_type: str
    ) -> None:
        writes = _Writes()
        for loaded in batch:
            self._postpone(writes, loaded.receipt, f"routing failed ({error_type})")
        try:
            async with self.engine.begin() as conn:
                await mark_failed(conn, org_id=org_id, token=token, errors=writes.failed)
                await mark_retry(conn, org_id=org_id, token=token, retries=writes.retries)
        except Exception as exc:  # noqa: BLE001 - the leases expire and the receipts come back
            log.warning("router.retry_not_recorded", error_type=type(exc).__name__)
            return
        self._counted(writes)

    async def _commit(self, org_id: str, token: str, batch: list[_Loaded]) -> None:
        ids = [loaded.receipt.receipt_id for loaded in batch]
        async with self._transaction() as tx:
            if not await fence_receipts(
                tx.conn, org_id=org_id, token=token, ids=ids, lease_ms=self.settings.lease_ms
            ):
                raise _LeaseLost
            written = await self._write(tx, org_id, token, batch)
        self._written(written)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[_Transaction]:
        """A write transaction; what the executor claimed along in it starts once it has
        committed, and is let go if it did not."""
        async with self.engine.connect() as conn:
            tx = _Transaction(conn)
            try:
                async with conn.begin():
                    yield tx
            except BaseException:
                if tx.along is not None and self.executor is not None:
                    self.executor.along_ended(tx.along, committed=False)
                raise
            if tx.along is not None and self.executor is not None:
                self.executor.along_ended(tx.along, committed=True)

    async def _write(
        self, tx: _Transaction, org_id: str, token: str, batch: list[_Loaded]
    ) -> tuple[_Writes, set[tuple[str, str]]]:
        """Map the batch with the CURRENT routes and write its outcome, in `tx`'s transaction
        (which holds the batch's leases); the executor claims the new WorkItems along."""
        conn = tx.conn
        routes = await current_routes(conn, org_id=org_id)
        now_ms = await read_now_ms(conn)
        writes = _Writes()
        for loaded in batch:
            self._route(writes, loaded, routes)
        await insert_events(conn, writes.events, now_ms=now_ms)
        new_queues = await self._enqueue(conn, org_id, writes.work, now_ms)
        await mark_materialized(conn, org_id=org_id, token=token, ids=writes.materialized)
        await mark_failed(conn, org_id=org_id, token=token, errors=writes.failed)
        await mark_retry(conn, org_id=org_id, token=token, retries=writes.retries)
        if writes.work and self.executor is not None:
            queues = {(item.family, item.queue_class) for _, item in writes.work}
            tx.along = await self.executor.claim_along(conn, queues, len(writes.work))
        self._crash_at(FAILPOINT_BEFORE_COMMIT)
        return writes, new_queues

    def _written(self, written: tuple[_Writes, set[tuple[str, str]]]) -> None:
        """After the commit: the queues now exist, the outcomes count."""
        writes, new_queues = written
        self._queues |= new_queues
        self._counted(writes)

    async def _enqueue(
        self, conn: AsyncConnection, org_id: str, work: list[tuple[str, NewItem]], now_ms: int
    ) -> set[tuple[str, str]]:
        policy = QueuePolicy(max_attempts=self.settings.work_max_attempts)
        return await enqueue_work(
            conn, self.work, org_id, work, now_ms=now_ms, policy=policy, known=self._queues
        )

    # ------------------------------------------------------------------ one receipt
    def _route(
        self, writes: _Writes, loaded: _Loaded, routes: dict[tuple[str, str], ActiveRoute]
    ) -> None:
        receipt = loaded.receipt
        rid = receipt.receipt_id
        if receipt.attempts > self.settings.max_attempts:  # claimed again and again: crashes
            writes.failed[rid] = f"routing did not finish in {self.settings.max_attempts} attempts"
            return
        if loaded.terminal is not None:
            writes.failed[rid] = loaded.terminal
            return
        if loaded.transient is not None or loaded.body is None:
            self._postpone(writes, receipt, loaded.transient or "the body is unavailable")
            return
        route = routes.get((receipt.connector, receipt.route_key))
        if route is None:
            writes.failed[rid] = (
                f"the route {receipt.connector}/{receipt.route_key} is no longer active"
            )
            return
        try:
            done = map_receipt(receipt, loaded.body, route)
        except MappingFailed as exc:
            writes.failed[rid] = str(exc)
            return
        writes.events.append(done.event)
        writes.materialized.append(rid)
        if done.item is not None:
            writes.work.append((done.event["event_id"], done.item))

    def _postpone(self, writes: _Writes, receipt: ClaimedReceipt, reason: str) -> None:
        if receipt.attempts >= self.settings.max_attempts:
            writes.failed[receipt.receipt_id] = (
                f"gave up after {receipt.attempts} attempts: {reason}"
            )
            return
        delay = backoff_ms(
            receipt.attempts, self.settings.backoff_base_ms, self.settings.backoff_cap_ms
        )
        writes.retries[receipt.receipt_id] = (delay, reason)

    def _counted(self, writes: _Writes) -> None:
        for outcome, count in (
            ("materialized", len(writes.materialized)),
            ("failed", len(writes.failed)),
            ("retried", len(writes.retries)),
        ):
            if count:
                ROUTED.labels(outcome).inc(count)
        self.stats.materialized += len(writes.materialized)
        self.stats.failed += len(writes.failed)
        self.stats.retried += len(writes.retries)
        for rid, reason in writes.failed.items():
            log.warning("router.receipt_failed", receipt_id=rid, reason=reason)

    def _crash_at(self, point: str) -> None:
        crash_at(self.failpoint, point)


def _unavailable(exc: BaseException) -> bool:
    """A failure of the connection or the server, not of this batch's rows."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError)
