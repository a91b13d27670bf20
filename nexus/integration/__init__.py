"""Integration: webhook ingress, signatures, receipts, events, work items, executor."""
