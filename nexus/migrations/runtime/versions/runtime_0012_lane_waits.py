"""runtime: blocked work leaves the claim range (docs/adr/0064).

Target lanes count their waiters; work items get `waiting_on` (the target key while an item
waits for its lane), the source-lane index `(family, lane_key, lane_seq)` and the target-lane
index `(family, waiting_on, run_after, id)`; items queued behind their source lane's head
become `waiting` (`add_lane_waits`).

Revision ID: runtime_0012
Revises: runtime_0011
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from nexus.platform.migrations import add_lane_waits, drop_lane_waits

revision: str = "runtime_0012"
down_revision: str | None = "runtime_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PREFIXES = ("runtime_inbox", "runtime_outbox")


def upgrade() -> None:
    for prefix in PREFIXES:
        add_lane_waits(prefix)


def downgrade() -> None:
    for prefix in PREFIXES:
        drop_lane_waits(prefix)
