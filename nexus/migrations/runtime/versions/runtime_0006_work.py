"""runtime: the command inbox and the outbox (work-engine tables), inbox dedupe, workload
run-as bindings, outbound webhook endpoints, and the operator audit.

The work-engine tables are built from `nexus.platform.workqueue.tables.work_tables` as it is at
this revision: a later change to that function needs its own migration here.

Revision ID: runtime_0006
Revises: runtime_0005
Create Date: 2026-12-10
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from nexus.runtime.admin import models as admin_tables

from nexus.runtime.inbox import models as inbox_tables

from nexus.runtime.outbox import models as outbox_tables

revision: str = "runtime_0006"
down_revision: str | None = "runtime_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    *inbox_tables.inbox.all,
    *outbox_tables.outbox.all,
    inbox_tables.inbox_message,
    inbox_tables.workload_binding,
    outbox_tables.outbound_endpoint,
    admin_tables.operator_audit,
)


def upgrade() -> None:
    snapshot = sa.MetaData()
    for table in TABLES:
        table.to_metadata(snapshot).create(op.get_bind())


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table.name)
