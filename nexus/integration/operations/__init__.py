"""Operating the integration: the admin API, dead letters and replay, failed receipts,
re-routing, retention, the operator audit."""
