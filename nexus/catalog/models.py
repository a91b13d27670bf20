"""Catalog tables. Org facts are keyed by `org_id` first; a release (publisher content and
its version -> digest mapping) is a global fact, the same for every org."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

#: Every release ever accepted: one version maps to one digest forever.
release = Table(
    "catalog_release",
    metadata,
    Column("app_id", String(40), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("digest", String(71), nullable=False, unique=True),
    Column("body", Text, nullable=False),  # the canonical release (manifest + components)
    Column("created_at_ms", BigInteger, nullable=False),
)

#: Per org: the CatalogRevision counter, the active pointer and the writer lease.
org = Table(
    "catalog_org",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("catalog_revision", Integer, nullable=False),  # last allocated
    Column("active_revision", Integer, nullable=False),  # the active pointer (CAS, monotonic)
    Column("writer_token", Integer, nullable=False),  # fencing token of the last lease granted
    Column("writer_job", String(36), nullable=True),
    Column("writer_until_ms", BigInteger, nullable=True),
    Column("updated_at_ms", BigInteger, nullable=False),
)

#: One install / upgrade / rollback / uninstall: the journaled state machine's current state.
job = Table(
    "catalog_job",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(36), primary_key=True),
    Column("operation", String(16), nullable=False),
    Column("app_id", String(40), nullable=False),
    Column("version", String(64), nullable=True),
    Column("digest", String(71), nullable=True),
    Column("previous_digest", String(71), nullable=True),  # what was installed before
    Column("state", String(24), nullable=False),
    Column("fencing_token", Integer, nullable=True),
    Column("catalog_revision", Integer, nullable=True),
    Column("schema_generation", Integer, nullable=True),
    Column("security_epoch", Integer, nullable=True),
    Column("error", String(1000), nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("ix_catalog_job_state", "org_id", "state"),
)

#: The journal: one row per state a job reached (written in the transition's transaction).
job_step = Table(
    "catalog_job_step",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(36), primary_key=True),
    Column("state", String(24), primary_key=True),
    Column("fencing_token", Integer, nullable=True),
    Column("detail", String(1000), nullable=True),
    Column("at_ms", BigInteger, nullable=False),
)

#: The Apps installed in an org (as of the last committed revision).
installation = Table(
    "catalog_installation",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("app_id", String(40), primary_key=True),
    Column("installation_id", String(36), nullable=False),
    Column("version", String(64), nullable=False),
    Column("digest", String(71), nullable=False),
    Column("state", String(16), nullable=False),  # installed | uninstalled
    Column("catalog_revision", Integer, nullable=False),
)

#: Write-once ownership of components and namespaces: the first App keeps them.
component = Table(
    "catalog_component",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("kind", String(24), primary_key=True),
    Column("component_key", String(160), primary_key=True),
    Column("owner_app_id", String(40), nullable=False),
    Column("first_revision", Integer, nullable=False),
)
namespace = Table(
    "catalog_namespace",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("namespace", String(40), primary_key=True),
    Column("owner_app_id", String(40), nullable=False),
)

#: Each revision's installed set: [{app_id, version, digest}] (what its snapshots project).
revision = Table(
    "catalog_revision",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("catalog_revision", Integer, primary_key=True),
    Column("job_id", String(36), nullable=False),
    Column("installed", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)

#: Published, checksummed consumer projections of a revision (immutable).
snapshot = Table(
    "catalog_snapshot",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("catalog_revision", Integer, primary_key=True),
    Column("consumer", String(16), primary_key=True),
    Column("content", Text, nullable=False),
    Column("checksum", String(64), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)
