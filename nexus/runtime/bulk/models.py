"""Bulk jobs and their chunks (ADR 0077)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, String, Table, Text
from sqlalchemy.dialects import mysql

from nexus.runtime.tables import metadata

#: Up to 4 GB on MariaDB (its TEXT holds 64 KB); SQLite's TEXT has no such bound.
LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql")

#: A bulk job: an ingest job (its rows uploaded while Open, saved after UploadComplete) or a
#: query job (its result pages written as it runs). Its chunks run as work-engine items of
#: the family `<org>/runtime.bulk` (`bulk/queue.py`); the job has no lease of its own.
bulk_job = Table(
    "runtime_bulk_job",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(18), primary_key=True),
    Column("kind", String(8), nullable=False),  # ingest | query | v1ingest | v1query
    Column("user_id", String(18), nullable=False),
    Column("object_name", String(80), nullable=False),
    Column("operation", String(16), nullable=False),
    Column("external_id_field", String(80), nullable=True),
    Column("column_delimiter", String(10), nullable=False),
    Column("line_ending", String(4), nullable=False),
    Column("api_version", String(8), nullable=False),
    Column("soql", Text, nullable=True),  # query jobs
    Column("columns", Text, nullable=True),  # JSON list: the upload's header, the query's
    # Open | UploadComplete | InProgress | JobComplete | Failed | Aborted
    Column("state", String(16), nullable=False),
    Column("error_message", String(1000), nullable=True),  # never a record value
    Column("uploaded_bytes", BigInteger, nullable=False),
    Column("chunks", Integer, nullable=False),  # chunks stored (ingest) or pages written
    Column("next_chunk", Integer, nullable=False),  # the next chunk to save (ingest)
    Column("records_processed", Integer, nullable=False),
    Column("records_failed", Integer, nullable=False),
    Column("started_at_ms", BigInteger, nullable=True),  # the first chunk's claim
    Column("processing_ms", BigInteger, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("content_type", String(8), nullable=True),  # Bulk API 1.0: JSON | CSV | XML
)
Index("ix_runtime_bulk_job_list", bulk_job.c.org_id, bulk_job.c.kind, bulk_job.c.created_at_ms)

#: A chunk of a job: for ingest, up to `ingest.CHUNK` uploaded rows (JSON list of lists) and,
#: once saved, each row's outcome (JSON); for a query, one result page (JSON rows).
bulk_chunk = Table(
    "runtime_bulk_chunk",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(18), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("records", Integer, nullable=False),
    Column("data", LONG_TEXT, nullable=False),
    Column("outcomes", LONG_TEXT, nullable=True),  # null until the chunk is saved
    Column("failed", Integer, nullable=False),
    Column("done", Boolean, nullable=False),
)

#: A batch of a Bulk API 1.0 job (`v1ingest`, `v1query`): its rows are the job's chunks from
#: `number * v1.BATCH_STRIDE` (at most `v1.MAX_BATCHES` batches a job, as Salesforce), a
#: query batch's result pages too. Each batch runs as soon as it is queued, as work items of
#: its own lane (`<job_id>/<batch_id>`). For a v1 job, `bulk_job.chunks` counts its batches.
bulk_batch = Table(
    "runtime_bulk_batch",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("job_id", String(18), primary_key=True),
    Column("batch_id", String(18), primary_key=True),
    Column("number", Integer, nullable=False),
    # Queued | InProgress | Completed | Failed | NotProcessed
    Column("state", String(16), nullable=False),
    Column("state_message", String(1000), nullable=True),  # never a record value
    Column("columns", Text, nullable=True),  # JSON list: the batch's header (ingest)
    Column("soql", Text, nullable=True),  # query batches
    Column("chunks", Integer, nullable=False),  # chunks stored (ingest) or pages written
    Column("next_chunk", Integer, nullable=False),
    Column("records_processed", Integer, nullable=False),
    Column("records_failed", Integer, nullable=False),
    Column("started_at_ms", BigInteger, nullable=True),
    Column("processing_ms", BigInteger, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)
Index(
    "ix_runtime_bulk_batch_number",
    bulk_batch.c.org_id,
    bulk_batch.c.job_id,
    bulk_batch.c.number,
    unique=True,
)
