"""integration: ConnectorOutboxEvent, ConnectorWorkItem (work-engine tables), the
event-to-work link (unique (event_id, work_type)) and the operator audit.

The work-engine tables are created as they were at this revision
(`nexus.platform.migrations.first_work_tables`); later revisions change them.

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
from nexus.platform.migrations import first_work_tables

revision: str = "integration_0003"
down_revision: str | None = "integration_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def tables(snapshot: sa.MetaData) -> tuple[sa.Table, ...]:
    return (
        routing_tables.connector_event.to_metadata(snapshot),
        *first_work_tables(snapshot, "integration_work"),
        delivery_tables.event_work.to_metadata(snapshot),
        operations_tables.operator_audit.to_metadata(snapshot),
    )


def upgrade() -> None:
    for table in tables(sa.MetaData()):
        table.create(op.get_bind())


def downgrade() -> None:
    for table in reversed(tables(sa.MetaData())):
        op.drop_table(table.name)
