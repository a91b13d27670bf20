"""Catalog: App packages, release digests, the publication state machine, snapshots."""
