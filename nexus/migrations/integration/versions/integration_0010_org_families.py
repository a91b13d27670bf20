"""integration: each org's work is its own family, `<org_id>/<pack>` (docs/adr/0067).

The org leads every key of the work tables (claim, source and target indexes, lanes, family
and queue rows): two orgs' deliveries never share a source lane, a target lane or a queue.
In-flight work moves with its org (`scope_work_by_org`).

Revision ID: integration_0010
Revises: integration_0009
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from nexus.platform.migrations import scope_work_by_org, unscope_work_by_org

revision: str = "integration_0010"
down_revision: str | None = "integration_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PREFIX = "integration_work"


def upgrade() -> None:
    scope_work_by_org(PREFIX)


def downgrade() -> None:
    unscope_work_by_org(PREFIX)
