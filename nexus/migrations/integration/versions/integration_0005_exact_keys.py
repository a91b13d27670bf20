"""integration: lane and target keys and provider delivery ids compare byte for byte on
MySQL/MariaDB (their default collation merged keys that differ only in case, so a second
delivery whose id differs only in case was taken for a redelivery of the first).

Revision ID: integration_0005
Revises: integration_0004
Create Date: 2026-12-13
"""

from collections.abc import Sequence

from nexus.platform.migrations import compare_keys_exactly

revision: str = "integration_0005"
down_revision: str | None = "integration_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = [
    ("integration_work_item", "lane_key", 191, True),
    ("integration_work_item", "target_key", 191, True),
    ("integration_work_source_lane", "lane_key", 191, False),
    ("integration_work_target_lane", "target_key", 191, False),
    ("integration_ingress_receipt", "provider_delivery_id", 191, False),
]


def upgrade() -> None:
    compare_keys_exactly(COLUMNS)


def downgrade() -> None:
    pass  # the binary collation is a strict refinement; nothing to undo
