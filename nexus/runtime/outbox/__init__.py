"""The Runtime outbox: after-save flow actions written in the mutation transaction and
executed by runtime-worker through the work engine (ADR 0019)."""
