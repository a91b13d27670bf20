"""runtime: the command inbox and the outbox (work-engine tables), inbox dedupe, workload
run-as bindings, outbound webhook endpoints, and the operator audit.

The work-engine tables are created as they were at this revision
(`nexus.platform.migrations.first_work_tables`); later revisions change them.

Revision ID: runtime_0006
Revises: runtime_0005
Create Date: 2026-12-10
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from nexus.platform.migrations import first_work_tables
from nexus.runtime.admin import models as admin_tables
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.outbox import models as outbox_tables

revision: str = "runtime_0006"
down_revision: str | None = "runtime_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def tables(snapshot: sa.MetaData) -> tuple[sa.Table, ...]:
    return (
        *first_work_tables(snapshot, "runtime_inbox"),
        *first_work_tables(snapshot, "runtime_outbox"),
        *(
            table.to_metadata(snapshot)
            for table in (
                inbox_tables.inbox_message,
                inbox_tables.workload_binding,
                outbox_tables.outbound_endpoint,
                admin_tables.operator_audit,
            )
        ),
    )


def upgrade() -> None:
    for table in tables(sa.MetaData()):
        table.create(op.get_bind())


def downgrade() -> None:
    for table in reversed(tables(sa.MetaData())):
        op.drop_table(table.name)
