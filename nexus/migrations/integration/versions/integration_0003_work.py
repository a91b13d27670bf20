"""integration: ConnectorOutboxEvent, ConnectorWorkItem (work-engine tables), the
event-to-work link (unique (event_id, work_type)) and the operator audit.

The work-engine tables are built from `nexus.platform.workqueue.tables.work_tables` as it is at
this revision: a later change to that function needs its own migration here.

Revision ID: integration_0003
Revises: integration_0002
Create Date: 2026-12-10
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from nexus.integration.delivery import models as delivery_tables

from nexus.integration.operations import models as operations_tables

from nexus.integration.routing import models as routing_tables

revision: str = "integration_0003"
down_revision: str | None = "integration_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    routing_tables.connector_event,
    *delivery_tables.work.all,
    delivery_tables.event_work,
    operations_tables.operator_audit,
)


def upgrade() -> None:
    snapshot = sa.MetaData()
    for table in TABLES:
        table.to_metadata(snapshot).create(op.get_bind())


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table.name)
