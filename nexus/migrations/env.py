"""Alembic environment shared by every logical service's version history.

Nexus never lets alembic open its own engine: `nexus.platform.migrations` runs each upgrade
inside `AsyncConnection.run_sync` and hands the synchronous connection over in
`config.attributes["connection"]`. The version table is per service
(`alembic_version_<service>`), so even a shared database could not mix two histories.
"""

from alembic import context

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `nexus migrate`, not the alembic command line")

context.configure(
    connection=connection,
    target_metadata=None,
    version_table=config.attributes["version_table"],
    transaction_per_migration=True,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
