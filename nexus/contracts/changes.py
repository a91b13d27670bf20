"""`records/updated`, `records/deleted` and `records/recent`: which records changed, were
deleted or were recently touched, as the caller may see them (data replication, ADR 0076).

Times are epoch milliseconds on the wire between roles (the database clock decides "now").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.describe import ObjectSummary

#: How far back a replication window may start (Salesforce's 30 days).
REPLICATION_DAYS = 30
#: The most ids one `records/updated` or `records/deleted` answer holds (EXCEEDED_ID_LIMIT).
MAX_CHANGED_IDS = 600_000
#: The most records `records/recent` answers.
MAX_RECENT = 200


class ChangesRequest(BaseModel):
    """Records of `object` whose SystemModstamp is in [start_ms, end_ms]."""

    model_config = ConfigDict(extra="forbid")

    object: str = Field(min_length=1, max_length=80)
    start_ms: int
    end_ms: int


class UpdatedResponse(BaseModel):
    ids: list[str]
    latest_covered_ms: int


class DeletedRecord(BaseModel):
    id: str
    deleted_ms: int


class DeletedResponse(BaseModel):
    deleted: list[DeletedRecord]
    earliest_available_ms: int
    latest_covered_ms: int


class RecentRequest(BaseModel):
    """The caller's most recently modified records (of `object`, or of every object it may
    read); with `object`, the object's summary too (404 when it may not read it)."""

    model_config = ConfigDict(extra="forbid")

    object: str | None = Field(default=None, min_length=1, max_length=80)
    limit: int = Field(default=MAX_RECENT, ge=1, le=MAX_RECENT)


class RecentRecord(BaseModel):
    object: str
    id: str
    name: str | None = None


class RecentResponse(BaseModel):
    summary: ObjectSummary | None = None
    records: list[RecentRecord]
