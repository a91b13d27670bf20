"""The integration admin API, `/admin/v1/integration/...` (public through the gateway).

Every route first asks Runtime whether the bearer of the request's token may operate the
integration (`nexus.platform.operator_gate`): 401 / 403 come from there. Then one use case of
`operations.py` runs against the role's service database (never the ingress pool).

    GET  /dead-letters        parked items (dead, outcome unknown) with event and receipt
                              context; filters pack, queue_class, connector, route,
                              failure_class, since, until, halted; paged by cursor
    GET  /halted-lanes        the heads of halted source lanes ("halted by <work id>")
    POST /dead-letters/replay {work_ids} or {since, ...filters}: a new attempt of each,
                              after checking the current route (refusals carry the reason)
    POST /dead-letters/purge  {work_ids}: delete for good (with events and receipts)
    POST /dead-letters/reroute {work_ids}: a dead item Runtime definitely refused, whose
                              route's mapping changed, is cancelled and its delivery routed
                              again from the receipt with the CURRENT route (docs/adr/0044)
    POST /lanes/skip          {work_id}: the halted head is cancelled, the lane moves on
    GET  /receipts            ?delivery_id= (&connector=): the receipt audit of a delivery
    GET  /audit               operator actions, newest first
    GET  /queues              depth per pack, queue class and state; in flight; oldest age
    GET  /failed-receipts     deliveries whose routing failed for good (nothing was made of
                              them); filters connector, route, delivery_id, since, until
    POST /failed-receipts/replay {receipt_ids} or {since, ...filters}: back to `received`, so
                              the router maps them with the CURRENT route (docs/adr/0044)
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.errors import BadRequest
from nexus.integration.operations import receipts as receipts_ops
from nexus.integration.operations import service as ops
from nexus.integration.operations.reroute import REROUTED, reroute_items
from nexus.integration.operations.schemas import (
    ActionReport,
    AuditEntry,
    DeadLetter,
    DeadLetterPage,
    DecisionOut,
    FailedReceipt,
    FailedReceiptPage,
    PurgeRequest,
    QueueCountOut,
    ReceiptActionReport,
    ReceiptDecisionOut,
    ReceiptReplayRequest,
    ReplayRequest,
    RerouteRequest,
    SkipRequest,
    at,
    decode_cursor,
    encode_cursor,
    to_ms,
)
from nexus.platform.workqueue.keys import installation_of

PREFIX = "/admin/v1/integration"
router = APIRouter(prefix=PREFIX)


async def operator(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> ops.Operator:
    """The operator, as Runtime vouches for them (401/403 otherwise)."""
    vouched = await request.app.state.operators.operator(authorization)
    return ops.Operator(org_id=vouched.org_id, user_id=vouched.user_id)


Operator = Annotated[ops.Operator, Depends(operator)]


def _engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.service.engine
    return engine


def _cursor(raw: str | None) -> tuple[int, str] | None:
    try:
        return decode_cursor(raw)
    except ValueError as exc:
        raise BadRequest(str(exc), code="INVALID_CURSOR") from None


def _report(report: ops.Report) -> ActionReport:
    return ActionReport(
        done=len(report.decisions) - report.count(ops.REFUSED),
        refused=report.count(ops.REFUSED),
        decisions=[
            DecisionOut(work_id=d.target, outcome=d.outcome, code=d.code, reason=d.reason)
            for d in report.decisions
        ],
        next_cursor=encode_cursor(report.next_cursor),
    )


async def _page(request: Request, who: ops.Operator, query: ops.DeadLetterQuery) -> DeadLetterPage:
    rows, cursor = await ops.dead_letters(_engine(request), operator=who, query=query)
    return DeadLetterPage(
        items=[DeadLetter.from_row(r) for r in rows], next_cursor=encode_cursor(cursor)
    )


@router.get("/dead-letters", response_model=DeadLetterPage)
async def dead_letters(
    *,
    request: Request,
    who: Operator,
    pack: str | None = None,
    queue_class: str | None = None,
    connector: str | None = None,
    route: str | None = None,
    failure_class: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    halted: bool = False,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeadLetterPage:
    query = ops.DeadLetterQuery(
        pack=pack,
        queue_class=queue_class,
        connector=connector,
        route=route,
        failure_class=failure_class,
        since_ms=to_ms(since),
        until_ms=to_ms(until),
        halted_only=halted,
        cursor=_cursor(cursor),
        limit=limit,
    )
    return await _page(request, who, query)


@router.get("/halted-lanes", response_model=DeadLetterPage)
async def halted_lanes(
    request: Request,
    who: Operator,
    pack: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeadLetterPage:
    query = ops.DeadLetterQuery(pack=pack, halted_only=True, cursor=_cursor(cursor), limit=limit)
    return await _page(request, who, query)


@router.post("/dead-letters/replay", response_model=ActionReport)
async def replay(request: Request, who: Operator, body: ReplayRequest) -> ActionReport:
    if body.work_ids is not None:
        report = await ops.replay_items(_engine(request), operator=who, work_ids=body.work_ids)
    else:
        query = ops.DeadLetterQuery(
            pack=body.pack,
            queue_class=body.queue_class,
            connector=body.connector,
            route=body.route,
            failure_class=body.failure_class,
            since_ms=to_ms(body.since),
            until_ms=to_ms(body.until),
            cursor=_cursor(body.cursor),
        )
        report = await ops.replay_since(_engine(request), operator=who, query=query)
    return _report(report)


@router.post("/dead-letters/purge", response_model=ActionReport)
async def purge(request: Request, who: Operator, body: PurgeRequest) -> ActionReport:
    return _report(await ops.purge_items(_engine(request), operator=who, work_ids=body.work_ids))


@router.post("/dead-letters/reroute", response_model=ActionReport)
async def reroute(request: Request, who: Operator, body: RerouteRequest) -> ActionReport:
    report = await reroute_items(
        _engine(request), operator=who, var_dir=request.app.state.var_dir, work_ids=body.work_ids
    )
    loops = getattr(request.app.state, "background", None)
    if report.count(REROUTED) and loops is not None:
        loops.worker.wake()  # new work items: the executor looks now
    return _report(report)


@router.post("/lanes/skip", response_model=ActionReport)
async def skip(request: Request, who: Operator, body: SkipRequest) -> ActionReport:
    decision = await ops.skip_head(_engine(request), operator=who, work_id=body.work_id)
    return _report(ops.Report([decision]))


@router.get("/receipts")
async def receipts(
    request: Request,
    who: Operator,
    delivery_id: Annotated[str, Query(min_length=1, max_length=191)],
    connector: str | None = None,
) -> dict[str, Any]:
    found = await ops.receipts(
        _engine(request), operator=who, delivery_id=delivery_id, connector=connector
    )
    for receipt in found:
        for key in ("received_at_ms", "last_delivery_at_ms"):
            receipt[key.removesuffix("_ms")] = at(receipt.pop(key))
    return {"receipts": found}


@router.get("/audit", response_model=list[AuditEntry])
async def audit(
    request: Request,
    who: Operator,
    before: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[AuditEntry]:
    rows = await ops.audit_log(_engine(request), operator=who, before_ms=to_ms(before), limit=limit)
    return [
        AuditEntry(
            audit_id=r["audit_id"],
            at=at(r["at_ms"]),
            actor=r["actor"],
            action=r["action"],
            target=r["target"],
            outcome=r["outcome"],
            reason=r["reason"],
        )
        for r in rows
    ]


@router.get("/queues", response_model=list[QueueCountOut])
async def queues(request: Request, who: Operator) -> list[QueueCountOut]:
    return [
        QueueCountOut(
            pack=installation_of(c.family),
            queue_class=c.queue_class,
            state=c.state,
            count=c.count,
            in_flight=c.in_flight,
            oldest_pending_age_seconds=None if c.oldest_age_ms is None else c.oldest_age_ms / 1000,
        )
        for c in await ops.queue_counts(_engine(request), operator=who)
    ]


@router.get("/failed-receipts", response_model=FailedReceiptPage)
async def failed_receipts(
    *,
    request: Request,
    who: Operator,
    connector: str | None = None,
    route: str | None = None,
    delivery_id: Annotated[str | None, Query(max_length=191)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> FailedReceiptPage:
    query = receipts_ops.FailedReceiptQuery(
        connector=connector,
        route=route,
        delivery_id=delivery_id,
        since_ms=to_ms(since),
        until_ms=to_ms(until),
        cursor=_cursor(cursor),
        limit=limit,
    )
    rows, next_cursor = await receipts_ops.failed_receipts(
        _engine(request), operator=who, query=query
    )
    return FailedReceiptPage(
        items=[FailedReceipt.from_row(r) for r in rows], next_cursor=encode_cursor(next_cursor)
    )


@router.post("/failed-receipts/replay", response_model=ReceiptActionReport)
async def replay_failed_receipts(
    request: Request, who: Operator, body: ReceiptReplayRequest
) -> ReceiptActionReport:
    var_dir: Path = request.app.state.var_dir
    if body.receipt_ids is not None:
        report = await receipts_ops.replay_receipts(
            _engine(request), operator=who, var_dir=var_dir, receipt_ids=body.receipt_ids
        )
    else:
        query = receipts_ops.FailedReceiptQuery(
            connector=body.connector,
            route=body.route,
            delivery_id=body.delivery_id,
            since_ms=to_ms(body.since),
            until_ms=to_ms(body.until),
            cursor=_cursor(body.cursor),
        )
        report = await receipts_ops.replay_failed_since(
            _engine(request), operator=who, var_dir=var_dir, query=query
        )
    replayed = report.count(ops.REPLAYED)
    loops = getattr(request.app.state, "background", None)
    if replayed and loops is not None:
        loops.wake_router()  # the router runs in this process: route them now
    return ReceiptActionReport(
        done=replayed,
        refused=report.count(ops.REFUSED),
        decisions=[
            ReceiptDecisionOut(receipt_id=d.target, outcome=d.outcome, code=d.code, reason=d.reason)
            for d in report.decisions
        ],
        next_cursor=encode_cursor(report.next_cursor),
    )
