"""`records/tree` (create parent records with their children in one all-or-none transaction)
and `records/related` (a record's parent, or a page of its children, by relationship name)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.records import RecordData, RecordError

#: Salesforce's composite tree limits: records in all, and levels of nesting.
MAX_TREE_RECORDS = 200
MAX_TREE_DEPTH = 5
#: A field name or a parent path (`Account.Name`): what a select list may hold.
FieldPath = Annotated[
    str, Field(max_length=255, pattern=r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$")
]


class TreeNode(BaseModel):
    """One record to create, named by `ref`; `children` by child relationship name."""

    model_config = ConfigDict(extra="forbid")

    ref: str = Field(min_length=1, max_length=80)
    object: str = Field(min_length=1, max_length=80)
    fields: dict[str, Any] = Field(default_factory=dict)
    children: dict[str, list[TreeNode]] = Field(default_factory=dict)


class TreeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    records: list[TreeNode] = Field(min_length=1, max_length=MAX_TREE_RECORDS)


class TreeCreated(BaseModel):
    ref: str
    id: str


class TreeFailure(BaseModel):
    ref: str
    errors: list[RecordError]


class TreeResponse(BaseModel):
    """Every record created (`created`, in request order), or nothing and the `failures`."""

    created: list[TreeCreated] = Field(default_factory=list)
    failures: list[TreeFailure] = Field(default_factory=list)


class RelatedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: str = Field(min_length=1, max_length=80)
    id: str = Field(min_length=15, max_length=18)
    relationship: str = Field(min_length=1, max_length=80)
    fields: list[FieldPath] | None = Field(default=None, min_length=1, max_length=500)


class RelatedPage(BaseModel):
    total_size: int
    done: bool
    records: list[dict[str, Any]]
    next_locator: str | None = None


class RelatedResponse(BaseModel):
    """A parent relationship answers `record`; a child relationship answers `page`."""

    record: RecordData | None = None
    page: RelatedPage | None = None
