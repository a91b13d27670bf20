"""The command inbox (work-engine tables), its dedupe rows and the workload run-as bindings."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, String, Table

from nexus.platform.db.backend import exact_key
from nexus.platform.workqueue.tables import work_tables
from nexus.runtime.tables import metadata

#: The command inbox (`AcceptCommand`, executed by runtime-worker) and the outbox (after-save
#: flow actions, written in the mutation transaction): work-engine tables in Runtime's database.
inbox = work_tables(metadata, "runtime_inbox")


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
