"""A bulk job's work items (ADR 0077): the imports' chunk shape (`imports/queue.py`) with a
family and an owner of their own, so only runtime-worker's bulk `Worker` claims them."""

from __future__ import annotations

from nexus.runtime.imports.queue import ChunkFamily

INSTALLATION = "runtime.bulk"
OWNER = "runtime-worker.bulk"
#: The doorbell (docs/adr/0055) rung after a commit that made a job ready to run.
BELL = b"bulk"

BULK = ChunkFamily(INSTALLATION, OWNER)
