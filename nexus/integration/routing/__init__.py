"""Connector routes and the receipt router: route declarations and their use cases, mapping a
delivery to a Runtime command, receipts becoming immutable events and WorkItems."""
