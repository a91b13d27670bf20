"""Bulk jobs (ADR 0077): ingest jobs that save uploaded rows, and query jobs that write a
query's result pages, both run in chunks by runtime-worker as the user who made them."""
