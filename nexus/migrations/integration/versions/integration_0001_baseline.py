"""integration: baseline of the integration logical service's version history.

The service's tables arrive in later revisions of this history; this revision marks the
database as owned by the integration service and managed by `nexus migrate`.

Revision ID: integration_0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

revision: str = "integration_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
