"""Data replication and recent records: `records/updated`, `records/deleted`, `records/recent`."""
