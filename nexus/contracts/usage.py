"""API usage between a dialect AppService and Runtime: request counts per user per day."""

from pydantic import BaseModel, ConfigDict, Field

USAGE_CAPABILITY = "runtime.usage"
USAGE_PATH = "/internal/v1/runtime/usage/record"
MAX_USAGE_ROWS = 1000


class UserRequests(BaseModel):
    model_config = ConfigDict(extra="forbid")

    org_id: str = Field(min_length=1, max_length=18)
    user_id: str = Field(min_length=1, max_length=18)
    requests: int = Field(ge=0, le=1_000_000_000)


class UsageRecordRequest(BaseModel):
    """Requests served since the last report, per user (0 only asks for the current total)."""

    model_config = ConfigDict(extra="forbid")

    counts: list[UserRequests] = Field(max_length=MAX_USAGE_ROWS)


class UsageRecordResponse(BaseModel):
    """The day (UTC, by the database clock) and each user's total for it, these included."""

    day: str
    totals: list[UserRequests]
