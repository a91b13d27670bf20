"""Runtime metadata and schema-owner tables. Every key starts with `org_id`."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, MetaData, String, Table, Text

from nexus.platform.db import exact_key
from nexus.platform.workqueue.tables import work_tables

metadata = MetaData()

org_state = Table(
    "runtime_org_state",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("schema_generation", BigInteger, nullable=False),
    Column("metadata_revision", BigInteger, nullable=False),
)

definition = Table(
    "runtime_definition",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("name", String(80), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("body", Text, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("apply_id", String(36), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)

active_definition = Table(
    "runtime_active_definition",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("name", String(80), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("activated_at_ms", BigInteger, nullable=False),
)

metadata_apply = Table(
    "runtime_metadata_apply",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("apply_id", String(36), primary_key=True),
    Column("state", String(16), nullable=False),  # staged | active | failed
    Column("definitions", Text, nullable=False),  # JSON [[kind, name, version], ...]
    Column("error", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("ix_metadata_apply_state", "org_id", "state"),
)

schema_operation = Table(
    "runtime_schema_operation",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("operation_id", String(36), primary_key=True),
    Column("apply_id", String(36), nullable=False),
    Column("table_name", String(64), nullable=False),
    Column("desired_spec", Text, nullable=False),
    Column("desired_fingerprint", String(64), nullable=False),
    Column("actual_fingerprint", String(64), nullable=True),
    Column("state", String(16), nullable=False),  # pending | applied | failed
    Column("attempts", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("applied_at_ms", BigInteger, nullable=True),
    Index("ix_schema_operation_apply", "org_id", "apply_id"),
)

permission_assignment = Table(
    "runtime_permission_assignment",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("user_id", String(18), primary_key=True),
    Column("permission_set", String(80), primary_key=True),
    Column("assigned_at_ms", BigInteger, nullable=False),
)

auto_number = Table(
    "runtime_auto_number",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("object_name", String(80), primary_key=True),
    Column("field_name", String(80), primary_key=True),
    Column("next_value", BigInteger, nullable=False),
)

#: API requests per user per UTC day (database clock), reported by the dialect AppServices.
api_usage = Table(
    "runtime_api_usage",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("user_id", String(18), primary_key=True),
    Column("day", String(10), primary_key=True),
    Column("requests", BigInteger, nullable=False),
)

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

idempotency = Table(
    "runtime_idempotency",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("idem_key", exact_key(128), primary_key=True),
    Column("request_digest", String(64), nullable=False),
    Column("result", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_runtime_idempotency_created", "created_at_ms"),  # retention
)

field_history = Table(
    "runtime_field_history",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("history_id", String(36), primary_key=True),
    Column("object_name", String(80), nullable=False),
    Column("record_id", String(18), nullable=False),
    Column("field_name", String(80), nullable=False),
    Column("old_value", Text, nullable=True),
    Column("new_value", Text, nullable=True),
    Column("changed_by_id", String(18), nullable=False),
    Column("changed_at_ms", BigInteger, nullable=False),
    Index("ix_field_history_record", "org_id", "record_id", "changed_at_ms"),
)

#: The global search index: one row per record and searchable field (see
#: `nexus.runtime.search.index`). On SQLite this name is an FTS5 virtual table with the same
#: columns (no primary key, no indexes: rows are addressed by a derived rowid).
search_index = Table(
    "runtime_search_index",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("record_id", String(18), primary_key=True),
    Column("field_name", String(80), primary_key=True),
    Column("object_name", String(80), nullable=False),
    Column("content", Text, nullable=False),
    Index("ix_search_index_object", "org_id", "object_name", "record_id"),
    Index("ft_search_index_content", "content", mysql_prefix="FULLTEXT"),
    info={"virtual_on_sqlite": True},
)

# ------------------------------------------------------------------ asynchronous work

#: The command inbox (`AcceptCommand`, executed by runtime-worker) and the outbox (after-save
#: flow actions, written in the mutation transaction): work-engine tables in Runtime's database.
inbox = work_tables(metadata, "runtime_inbox")
outbox = work_tables(metadata, "runtime_outbox")

#: The inbox dedupe boundary: one row per accepted message key (source service + message id).
inbox_message = Table(
    "runtime_inbox_message",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("message_key", exact_key(191), primary_key=True),
    Column("work_id", String(36), nullable=False),
    Column("command_sha256", String(64), nullable=False),  # same key, other command: refused
    Column("accepted_at_ms", BigInteger, nullable=False),
    Index("ix_runtime_inbox_message_accepted", "accepted_at_ms"),  # retention
)

#: Which user a calling workload's commands run as, per org (set by an administrator).
workload_binding = Table(
    "runtime_workload_binding",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("workload", String(64), primary_key=True),
    Column("user_id", String(18), nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)

#: Outbound webhook endpoints (operator-controlled bindings; flows name them, never URLs).
#: The signing secret lives in the secrets store under `secret_ref`.
outbound_endpoint = Table(
    "runtime_outbound_endpoint",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("url", String(2048), nullable=False),
    Column("secret_ref", String(64), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)

#: Operator actions on Runtime work (replay, skip, purge): who, what, when, with what result.
operator_audit = Table(
    "runtime_operator_audit",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("audit_id", String(32), primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(191), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Index("ix_runtime_operator_audit_at", "org_id", "at_ms"),
)

#: CSV imports (ADR 0040): a background job that creates or upserts records as the user who
#: uploaded them, in chunks, each chunk committed with the job's progress.
import_job = Table(
    "runtime_import_job",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(32), primary_key=True),
    Column("user_id", String(18), nullable=False),
    Column("object_name", String(80), nullable=False),
    Column("mode", String(8), nullable=False),  # insert | upsert
    Column("external_id_field", String(80), nullable=True),
    Column("mapping", Text, nullable=False),  # JSON: CSV column -> field
    Column("state", String(16), nullable=False),  # queued | running | done | failed
    Column("total", Integer, nullable=False),
    Column("processed", Integer, nullable=False),
    Column("succeeded", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("error", String(300), nullable=True),  # sanitized, when the job itself failed
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", BigInteger, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("ix_runtime_import_job_state", "state", "lease_until"),
)

#: The rows of an import: values until processed (then deleted), the error of a failed row.
import_row = Table(
    "runtime_import_row",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(32), primary_key=True),
    Column("row_no", Integer, primary_key=True),
    Column("fields", Text, nullable=True),  # JSON field -> value; null once processed
    Column("error", String(300), nullable=True),
)
