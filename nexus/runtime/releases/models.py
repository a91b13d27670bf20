"""Catalog release fencing and the runtime-api replicas that acknowledge releases."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, String, Table

from nexus.runtime.tables import metadata

#: Catalog release calls (docs/adr/0034): the newest fencing token seen per org (an older
#: one is refused) and the newest CatalogRevision prepared for it.
release_fence = Table(
    "runtime_release_fence",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("fencing_token", BigInteger, nullable=False),
    Column("prepared_revision", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)


#: Each runtime-api replica: the CatalogRevision it preloaded and when it was last alive.
replica = Table(
    "runtime_replica",
    metadata,
    Column("replica_id", String(128), primary_key=True),
    Column("org_id", String(18), nullable=True),
    Column("prepared_revision", BigInteger, nullable=False),
    Column("seen_at_ms", BigInteger, nullable=False),
)
