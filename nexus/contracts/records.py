"""Neutral record-operation outcomes. L1 dialects map these categories to their own envelopes."""

from enum import StrEnum

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


class RecordError(BaseModel):
    category: ErrorCategory
    message: str
    fields: list[str] = Field(default_factory=list)
