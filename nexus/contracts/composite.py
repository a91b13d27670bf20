"""`records/composite`: ordered record operations in ONE Runtime call and ONE transaction.

Each item may name itself (`ref`) and use what an earlier item returned through references
`@{ref.path}` in its `id`, `external_id`, `fields` values and `select` (a whole value that is
one reference takes the referenced value as it is; a reference inside a longer string is
replaced by its text). A mutation returns `id`, `success` and `created`; a read returns the
record's fields (and `id`). With `all_or_none`, the first item that fails halts the rest and
the whole transaction is rolled back, so earlier creates, updates and deletes are undone.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.records import ItemResult, RecordData

#: The most items one composite call takes (the Salesforce `/composite` limit).
MAX_COMPOSITE_ITEMS = 25
REFERENCE = re.compile(r"@\{([A-Za-z0-9_]+)\.([A-Za-z0-9_.\[\]]+)\}")
_PATH_PART = re.compile(r"\.|\[(\d+)\]")


class CompositeItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ref: str | None = Field(default=None, max_length=80)
    op: Literal["create", "update", "delete", "upsert", "read"]
    object: str | None = Field(default=None, max_length=80)
    id: str | None = Field(default=None, max_length=255)
    fields: dict[str, Any] = Field(default_factory=dict)
    #: the fields a read returns (all the caller may read when absent)
    select: list[str] | None = Field(default=None, max_length=500)
    external_id_field: str | None = Field(default=None, max_length=80)
    external_id: str | int | None = None


class CompositeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[CompositeItem] = Field(min_length=1, max_length=MAX_COMPOSITE_ITEMS)
    all_or_none: bool = False


class CompositeError(BaseModel):
    """An item that failed as a whole request would: the neutral error envelope + status."""

    status: int
    code: str
    message: str
    fields: dict[str, str] | None = None


class CompositeOutcome(BaseModel):
    """`done`, `failed` (see `result` or `error`), `unresolved` (a reference to an item that
    did not run or has no such value), `rolled_back` (done, then undone with the rest) or
    `halted` (never ran: an earlier item of an all-or-none call failed)."""

    ref: str | None = None
    state: Literal["done", "failed", "unresolved", "rolled_back", "halted"]
    result: ItemResult | None = None
    record: RecordData | None = None
    error: CompositeError | None = None


class CompositeResponse(BaseModel):
    outcomes: list[CompositeOutcome]
    rolled_back: bool = False


class UnresolvedReference(Exception):
    """A reference names no earlier item, or a value that item did not return."""


def resolve_references(value: Any, known: dict[str, Any]) -> Any:
    """`value` with every `@{ref.path}` replaced from `known` (ref -> what that item returned)."""
    if isinstance(value, str):
        whole = REFERENCE.fullmatch(value)
        if whole is not None:
            return lookup(known, whole.group(1), whole.group(2))
        return REFERENCE.sub(lambda m: str(lookup(known, m.group(1), m.group(2))), value)
    if isinstance(value, list):
        return [resolve_references(v, known) for v in value]
    if isinstance(value, dict):
        return {k: resolve_references(v, known) for k, v in value.items()}
    return value


def lookup(known: dict[str, Any], ref: str, path: str) -> Any:
    """The value at `path` (`a.b`, `records[0].Id`) of what `ref` returned."""
    if ref not in known:
        raise UnresolvedReference(ref)
    value = known[ref]
    for part in _PATH_PART.split(path):
        if part is None or part == "":
            continue
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise UnresolvedReference(ref)
    return value
