"""Request and response models of the integration admin API (`/admin/v1/integration/...`).

Ids, kinds, versions, times and sanitized errors only: never a payload, a body snapshot, a
mapped command or a header value. Times are UTC ISO 8601 on the wire.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nexus.platform.workqueue.keys import installation_of
from nexus.platform.workqueue.operate import MAX_BATCH

WorkIds = Annotated[list[Annotated[str, Field(min_length=1, max_length=36)]], Field(min_length=1)]


def at(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_ms(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def encode_cursor(cursor: tuple[int, str] | None) -> str | None:
    return None if cursor is None else f"{cursor[0]}.{cursor[1]}"


#: the largest millisecond time a cursor may carry: the columns it is compared with are
#: signed 64-bit (a larger one is an overflow in the driver, not an empty page)
MAX_CURSOR_MS = 2**63 - 1


def decode_cursor(raw: str | None) -> tuple[int, str] | None:
    if not raw:
        return None
    ms, _, work_id = raw.partition(".")
    # ASCII digits only: str.isdigit() also accepts superscripts, which int() refuses
    if (
        not (ms.isascii() and ms.isdigit())
        or len(ms) > 19
        or int(ms) > MAX_CURSOR_MS
        or not work_id
    ):
        raise ValueError("a cursor is what a previous page returned as next_cursor")
    return int(ms), work_id


class EventContext(BaseModel):
    event_id: str
    receipt_id: str
    event_kind: str | None
    connector: str
    route: str
    route_version: int
    pack: str
    pack_generation: int
    source_object_kind: str | None
    source_object_id: str | None
    parse_outcome: str
    created_at: datetime | None


class ReceiptContext(BaseModel):
    delivery_id: str
    received_at: datetime | None
    deliveries: int
    #: redeliveries of this delivery id that carried another body (the first one is kept)
    digest_mismatches: int = 0
    router_status: str


class DeadLetter(BaseModel):
    work_id: str
    state: str
    pack: str
    queue_class: str
    attempt: int
    max_attempts: int
    failure_class: str | None
    error: str | None  # sanitized when recorded: class and short message
    failed_at: datetime | None
    lane_key: str | None
    halts_lane: bool  # its source lane is "halted by" this item (skip or replay it)
    event: EventContext
    receipt: ReceiptContext | None

    @classmethod
    def from_row(cls, row: Any) -> DeadLetter:
        return cls(
            work_id=row.id,
            state=row.state,
            pack=installation_of(row.family),
            queue_class=row.queue_class,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            failure_class=row.failure_class,
            error=row.last_error,
            failed_at=at(row.finished_at),
            lane_key=row.lane_key,
            halts_lane=row.halted_by is not None and row.halted_by == row.id,
            event=EventContext(
                event_id=row.event_id,
                receipt_id=row.receipt_id,
                event_kind=row.event_kind,
                connector=row.connector,
                route=row.route_key,
                route_version=row.route_version,
                pack=row.installed_pack_id,
                pack_generation=row.pack_generation,
                source_object_kind=row.source_object_kind,
                source_object_id=row.source_object_id,
                parse_outcome=row.parse_outcome,
                created_at=at(row.event_created_at_ms),
            ),
            receipt=None
            if row.provider_delivery_id is None
            else ReceiptContext(
                delivery_id=row.provider_delivery_id,
                received_at=at(row.received_at_ms),
                deliveries=row.deliveries,
                digest_mismatches=row.digest_mismatches,
                router_status=row.router_status,
            ),
        )


class DeadLetterPage(BaseModel):
    items: list[DeadLetter]
    next_cursor: str | None


class ReplayRequest(BaseModel):
    """Either `work_ids` (at most 500), or everything parked since `since` (optionally until
    `until`, narrowed by pack, queue class, route, failure class; `cursor` to go on)."""

    model_config = ConfigDict(extra="forbid")

    work_ids: Annotated[WorkIds, Field(max_length=MAX_BATCH)] | None = None
    since: datetime | None = None
    until: datetime | None = None
    pack: str | None = None
    queue_class: str | None = None
    connector: str | None = None
    route: str | None = None
    failure_class: str | None = None
    cursor: str | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> ReplayRequest:
        if (self.work_ids is None) == (self.since is None):
            raise ValueError("give exactly one of 'work_ids' or 'since'")
        return self


class SkipRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    work_id: Annotated[str, Field(min_length=1, max_length=36)]


class PurgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    work_ids: Annotated[WorkIds, Field(max_length=MAX_BATCH)]


class RerouteRequest(PurgeRequest):
    """Dead items (at most 500) to re-route from their receipts with the current route."""


class DecisionOut(BaseModel):
    work_id: str
    outcome: str  # replayed | skipped | purged | rerouted | refused
    code: str | None = None
    reason: str | None = None


class ActionReport(BaseModel):
    done: int
    refused: int
    decisions: list[DecisionOut]
    next_cursor: str | None = None  # a bulk replay stopped early: send it back to go on


class AuditEntry(BaseModel):
    audit_id: str
    at: datetime | None
    actor: str
    action: str
    target: str
    outcome: str
    reason: str | None


class QueueCountOut(BaseModel):
    pack: str
    queue_class: str
    state: str
    count: int
    in_flight: int
    oldest_pending_age_seconds: float | None


# ---------------------------------------------------------------------- failed receipts


class FailedReceipt(BaseModel):
    """A delivery whose routing failed for good (nothing was materialized from it)."""

    receipt_id: str
    connector: str
    route: str
    route_version: int  # the route's version when the delivery arrived
    delivery_id: str
    event_kind: str | None
    received_at: datetime | None
    failed_at: datetime | None
    attempts: int
    deliveries: int
    body_bytes: int
    error: str | None  # sanitized: names the route's pointer or field, never a value

    @classmethod
    def from_row(cls, row: Any) -> FailedReceipt:
        return cls(
            receipt_id=row.receipt_id,
            connector=row.connector,
            route=row.route_key,
            route_version=row.route_version,
            delivery_id=row.provider_delivery_id,
            event_kind=row.event_kind,
            received_at=at(row.received_at_ms),
            failed_at=at(row.failed_at_ms),
            attempts=row.router_attempts,
            deliveries=row.deliveries,
            body_bytes=row.body_bytes,
            error=row.error,
        )


class FailedReceiptPage(BaseModel):
    items: list[FailedReceipt]
    next_cursor: str | None


ReceiptIds = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=32)]],
    Field(min_length=1, max_length=MAX_BATCH),
]


class ReceiptReplayRequest(BaseModel):
    """Either `receipt_ids` (at most 500), or every receipt that failed since `since`
    (optionally until `until`, narrowed by connector, route, delivery id; `cursor` to go on).
    Each is routed again with the route's CURRENT active version."""

    model_config = ConfigDict(extra="forbid")

    receipt_ids: ReceiptIds | None = None
    since: datetime | None = None
    until: datetime | None = None
    connector: str | None = None
    route: str | None = None
    delivery_id: str | None = None
    cursor: str | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> ReceiptReplayRequest:
        if (self.receipt_ids is None) == (self.since is None):
            raise ValueError("give exactly one of 'receipt_ids' or 'since'")
        return self


class ReceiptDecisionOut(BaseModel):
    receipt_id: str
    outcome: str  # replayed | refused
    code: str | None = None
    reason: str | None = None


class ReceiptActionReport(BaseModel):
    done: int
    refused: int
    decisions: list[ReceiptDecisionOut]
    next_cursor: str | None = None
