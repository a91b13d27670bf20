"""runtime: lane, target, idempotency and inbox message keys compare byte for byte on
MySQL/MariaDB (their default collation merged keys that differ only in case).

Revision ID: runtime_0008
Revises: runtime_0007
Create Date: 2026-12-13
"""

from collections.abc import Sequence

from nexus.platform.migrations import compare_keys_exactly

revision: str = "runtime_0008"
down_revision: str | None = "runtime_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = [
    *(
        column
        for prefix in ("runtime_inbox", "runtime_outbox")
        for column in (
            (f"{prefix}_item", "lane_key", 191, True),
            (f"{prefix}_item", "target_key", 191, True),
            (f"{prefix}_source_lane", "lane_key", 191, False),
            (f"{prefix}_target_lane", "target_key", 191, False),
        )
    ),
    ("runtime_idempotency", "idem_key", 128, False),
    ("runtime_inbox_message", "message_key", 191, False),
]


def upgrade() -> None:
    compare_keys_exactly(COLUMNS)


def downgrade() -> None:
    pass  # the binary collation is a strict refinement; nothing to undo
