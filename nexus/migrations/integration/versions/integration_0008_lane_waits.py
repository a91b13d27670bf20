"""integration: blocked work leaves the claim range (docs/adr/0064).

Target lanes count their waiters; work items get `waiting_on` (the target key while an item
waits for its lane), the source-lane index `(family, lane_key, lane_seq)` and the target-lane
index `(family, waiting_on, run_after, id)`; items queued behind their source lane's head
become `waiting` (`add_lane_waits`).

Revision ID: integration_0008
Revises: integration_0007
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from nexus.platform.migrations import add_lane_waits, drop_lane_waits

revision: str = "integration_0008"
down_revision: str | None = "integration_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PREFIXES = ("integration_work",)


def upgrade() -> None:
    for prefix in PREFIXES:
        add_lane_waits(prefix)


def downgrade() -> None:
    for prefix in PREFIXES:
        drop_lane_waits(prefix)
