"""runtime-worker's bulk loop (ADR 0077): the chunked-job runner of CSV imports
(`imports/runner.py`) over the `runtime.bulk` families, with the bulk chunks' handler."""

from __future__ import annotations

from nexus.platform.settings import Settings
from nexus.runtime.bulk import chunks
from nexus.runtime.bulk.queue import BELL, BULK
from nexus.runtime.imports.runner import ChunkKind

#: Failpoint (`NEXUS_FAILPOINT`): die right after a chunk that leaves work to do committed.
FAILPOINT_BETWEEN_CHUNKS = "bulk.between_chunks"


class _BulkJobs:
    start = staticmethod(chunks.start)
    run_chunk = staticmethod(chunks.run_chunk)
    fail = staticmethod(chunks.fail)


def bulk_kind(settings: Settings) -> ChunkKind:
    del settings  # no pause between a bulk job's chunks: it runs as fast as it saves
    return ChunkKind(
        name="bulk",
        family=BULK,
        jobs=_BulkJobs(),
        bell=BELL,
        failpoint=FAILPOINT_BETWEEN_CHUNKS,
    )
