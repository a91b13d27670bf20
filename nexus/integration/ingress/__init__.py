"""Webhook ingress: route -> signature -> durable receipt -> ack. The endpoint, the ingress
use case, the group-commit writer, the receipts' SQL and tables, bodies kept as files."""
