"""Neutral record-operation outcomes. L1 dialects map these categories to their own envelopes."""

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class ErrorCategory(StrEnum):
    NOT_FOUND = "NOT_FOUND"
    INSUFFICIENT_ACCESS = "INSUFFICIENT_ACCESS"
    INVALID_FIELD = "INVALID_FIELD"
    REQUIRED_FIELD_MISSING = "REQUIRED_FIELD_MISSING"
    INVALID_TYPE_VALUE = "INVALID_TYPE_VALUE"
    DUPLICATE_VALUE = "DUPLICATE_VALUE"
    ENTITY_IS_DELETED = "ENTITY_IS_DELETED"
    CONFLICT = "CONFLICT"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    VALIDATION_RULE = "VALIDATION_RULE"  # a validation rule's formula found the record invalid


class ErrorReason(StrEnum):
    """What exactly was wrong, within a category, for dialects whose clients tell these apart
    (a dialect without an answer for a reason falls back to the category)."""

    NUMBER_OUT_OF_RANGE = "NUMBER_OUT_OF_RANGE"  # more digits than the field's precision
    MALFORMED_ID = "MALFORMED_ID"  # a value that is not a record id at all
    READ_ONLY_FIELD = "READ_ONLY_FIELD"  # a system, computed or read-only field was given
    RESTRICTED_PICKLIST = "RESTRICTED_PICKLIST"  # a value a restricted picklist does not list


class RecordError(BaseModel):
    category: ErrorCategory
    message: str
    fields: list[str] = Field(default_factory=list)
    reason: ErrorReason | None = None


MAX_BATCH = 200


class MutateItem(BaseModel):
    """One create / update / delete / undelete / upsert, with its own idempotency key."""

    op: str = Field(pattern=r"^(create|update|delete|undelete|upsert)$")
    object: str | None = None
    id: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)
    external_id_field: str | None = None
    external_id: str | int | None = None
    row_version: int | None = None
    idempotency_key: str | None = Field(default=None, max_length=128)


class MutateRequest(BaseModel):
    items: list[MutateItem]
    all_or_none: bool = False


class ItemResult(BaseModel):
    id: str | None = None
    success: bool
    created: bool = False
    row_version: int | None = None
    errors: list[RecordError] = Field(default_factory=list)


class MutateResponse(BaseModel):
    results: list[ItemResult]


class RecordData(BaseModel):
    object: str
    id: str
    row_version: int
    fields: dict[str, Any]
