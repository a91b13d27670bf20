"""Neutral describe results: only what the caller may see, computed in Runtime."""

from typing import Any

from pydantic import BaseModel, Field


class ObjectSummary(BaseModel):
    name: str
    label: str
    label_plural: str
    key_prefix: str
    custom: bool
    createable: bool
    updateable: bool
    deletable: bool
    queryable: bool = True
    #: `sobjects/{T}/updated` and `/deleted` answer for it (record objects, not system ones).
    replicateable: bool = True


class PicklistEntry(BaseModel):
    value: str
    label: str
    active: bool
    default_value: bool


class FieldDescribe(BaseModel):
    name: str
    label: str
    type: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    nillable: bool
    createable: bool
    updateable: bool
    unique: bool
    external_id: bool
    name_field: bool
    custom: bool
    calculated: bool = False
    calculated_formula: str | None = None
    default_value: Any = None
    picklist_values: list[PicklistEntry] = Field(default_factory=list)
    restricted_picklist: bool = False
    reference_to: list[str] = Field(default_factory=list)
    relationship_name: str | None = None
    track_history: bool = False


class ChildRelationship(BaseModel):
    child_object: str
    field: str
    relationship_name: str | None
    cascade_delete: bool


class ObjectDescribe(BaseModel):
    summary: ObjectSummary
    sharing_model: str
    fields: list[FieldDescribe]
    child_relationships: list[ChildRelationship]
