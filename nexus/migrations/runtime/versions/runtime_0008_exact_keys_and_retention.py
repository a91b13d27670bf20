"""runtime: lane, target, idempotency and inbox message keys compare byte for byte on
MySQL/MariaDB (their default collation merged keys that differ only in case); indexes the
retention loop reads (inbox message-key dedupe rows and idempotency keys by age); record
tables' datetime columns keep milliseconds on MySQL/MariaDB (DATETIME(3); a table rebuild per
record table on upgrade).

Revision ID: runtime_0008
Revises: runtime_0007
Create Date: 2026-12-13
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

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


INDEXES = [
    ("ix_runtime_idempotency_created", "runtime_idempotency", "created_at_ms"),
    # runtime_0006 builds the inbox tables from the models: new databases have this one
    ("ix_runtime_inbox_message_accepted", "runtime_inbox_message", "accepted_at_ms"),
]


#: record tables' whole-second datetime columns (MySQL/MariaDB only)
WHOLE_SECONDS = sa.text(
    "SELECT table_name, column_name, is_nullable FROM information_schema.columns"
    " WHERE table_schema = DATABASE() AND table_name LIKE 'rt\\_%'"
    " AND data_type = 'datetime' AND datetime_precision = 0"
)


def upgrade() -> None:
    compare_keys_exactly(COLUMNS)
    bind = op.get_bind()
    if bind.dialect.name == "mysql":
        for table, column, nullable in list(bind.execute(WHOLE_SECONDS)):
            null = "NULL" if nullable == "YES" else "NOT NULL"
            op.execute(f"ALTER TABLE `{table}` MODIFY `{column}` DATETIME(3) {null}")
    inspector = sa.inspect(op.get_bind())
    for name, table, column in INDEXES:
        if name not in {ix["name"] for ix in inspector.get_indexes(table)}:
            op.create_index(name, table, [column])


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)
    # the binary collation is a strict refinement: left as it is
