"""CSV import jobs and their rows."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, String, Table, Text

from nexus.runtime.tables import metadata

#: CSV imports (ADR 0040): a background job that creates or upserts records as the user who
#: uploaded them, in chunks, each chunk committed with the job's progress. Its chunks run as
#: work-engine items (`imports/queue.py`, ADR 0062): the job has no lease of its own.
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
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
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
