"""The inbox queue: its family and class in Runtime's work tables, its policy, its payload."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.commands import RecordCommand
from nexus.platform.workqueue.keys import family_key
from nexus.platform.workqueue.store import QueuePolicy, WorkStore
from nexus.platform.workqueue.tables import WorkTables
from nexus.runtime.inbox.models import inbox

#: The inbox's installation: each org's commands are the family `<org_id>/runtime.inbox`.
INSTALLATION = "runtime.inbox"
QUEUE_CLASS = "commands"
#: The family's owner: every runtime-worker process claims for it (one owner, many processes).
OWNER = "runtime-worker"
LANE_KEY_MAX = 191
DEFAULT_MAX_ATTEMPTS = 8  # = the `inbox_max_attempts` setting's default


class InboxItem(BaseModel):
    """The payload of one inbox work item: the accepted command and whom it runs as."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    org_id: str
    workload: str
    message_id: str
    run_as: Annotated[str, Field(min_length=15, max_length=18)]
    command: RecordCommand
    correlation: dict[str, str] = Field(default_factory=dict)


def family(org_id: str) -> str:
    return family_key(org_id, INSTALLATION)


def inbox_store(
    *,
    lease_ms: int = 30_000,
    tables: WorkTables = inbox,
    orgs: Collection[str] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> WorkStore:
    return WorkStore(
        tables, owner=OWNER, lease_ms=lease_ms, orgs=orgs, policy=inbox_policy(max_attempts)
    )


def inbox_policy(max_attempts: int) -> QueuePolicy:
    """A dead command does not halt its record's lane: it is refused by content (replaying
    it unchanged fails the same way), so later commands on that record go on (ADR 0017)."""
    return QueuePolicy(max_attempts=max_attempts, lane_policy="skip")


def lane_key(org_id: str, command: RecordCommand) -> str:
    """Commands on one record (object + external id, per org) run in acceptance order."""
    key = f"{org_id}:{command.object.lower()}:{command.external_id}"
    if len(key) <= LANE_KEY_MAX:
        return key
    digest = hashlib.sha256(command.external_id.encode()).hexdigest()
    return f"{org_id}:{command.object.lower()}:#{digest}"
