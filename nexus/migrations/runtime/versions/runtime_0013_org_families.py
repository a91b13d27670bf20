"""runtime: each org's commands, flows and imports are families of their own (docs/adr/0067).

`runtime.inbox`, `runtime.flows` and `runtime.import` become `<org_id>/runtime.inbox` (and so
on) in the inbox's and the outbox's work tables: the org leads every work key, a worker can be
scoped to some orgs, and an operator's dead-letter actions see only their org's items.
In-flight work moves with its org (`scope_work_by_org`).

Revision ID: runtime_0013
Revises: runtime_0012
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from nexus.platform.migrations import scope_work_by_org, unscope_work_by_org

revision: str = "runtime_0013"
down_revision: str | None = "runtime_0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PREFIXES = ("runtime_inbox", "runtime_outbox")


def upgrade() -> None:
    for prefix in PREFIXES:
        scope_work_by_org(prefix)


def downgrade() -> None:
    for prefix in PREFIXES:
        unscope_work_by_org(prefix)
