"""Gateway: static route table, streaming proxy, admission. No App semantics."""
