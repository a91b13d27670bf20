"""What an outbox item is: its work family and queue classes, and its payload.

One family per org, `<org_id>/runtime.flows`, owned by runtime-worker, with two queue
classes so a slow or failing webhook receiver never delays record actions (deficit
round-robin between them):

    record    create_record / update_record: DML in system context, attributed to the user
    webhook   a signed POST to an operator-bound endpoint

An item carries the action fully evaluated when the record was saved (formulas ran over the
saved values in the mutation transaction) plus the exact flow version that produced it, so
the worker never re-evaluates metadata that may have changed since.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from nexus.platform.workqueue.keys import family_key
from nexus.platform.workqueue.store import QueuePolicy, WorkStore
from nexus.runtime.outbox import models as m

INSTALLATION = "runtime.flows"
DEFAULT_MAX_ATTEMPTS = 10  # = the `outbox_max_attempts` setting's default
OWNER = "runtime-worker"
RECORD = "record"
WEBHOOK = "webhook"
QUEUE_CLASSES = (RECORD, WEBHOOK)
#: The doorbell (docs/adr/0032, 0055) rung after a commit that wrote outbox items.
BELL = b"outbox"
#: A user's save runs its after-save flows at depth 1; records those actions save run
#: before-save flows and validation but enqueue no further after-save actions.
MAX_FLOW_DEPTH = 1
#: An item's payload must fit a MySQL TEXT column with room to spare.
MAX_PAYLOAD_BYTES = 48 * 1024

ActionKind = Literal["create_record", "update_record", "webhook"]


class OutboxMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    org_id: str
    kind: ActionKind
    flow: str
    flow_version: int
    object: str  # the triggering record's object
    record_id: str
    user_id: str  # who saved it: record actions are attributed to them
    depth: int = 1
    target_object: str | None = None  # record actions
    target_id: str | None = None  # update_record
    fields: dict[str, Any] = {}
    endpoint: str | None = None  # webhook
    body: dict[str, Any] | None = None  # webhook: {"type", "timestamp", "data"}


def family(org_id: str) -> str:
    return family_key(org_id, INSTALLATION)


def outbox_store(
    *,
    lease_ms: int = 30_000,
    orgs: Collection[str] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> WorkStore:
    return WorkStore(
        m.outbox, owner=OWNER, lease_ms=lease_ms, orgs=orgs, policy=queue_policy(max_attempts)
    )


def queue_policy(max_attempts: int) -> QueuePolicy:
    return QueuePolicy(max_attempts=max_attempts, lane_policy="skip")
