"""The schema owner: physical record tables, additive DDL, journaled and reconciled."""
