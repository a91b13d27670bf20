"""Neutral results of Runtime's UI use cases (`/internal/v1/runtime/ui/...`): what a browser
screen needs, with every access decision already made by Runtime."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from nexus.contracts.describe import ObjectDescribe, ObjectSummary


class ListViewRef(BaseModel):
    api_name: str
    label: str


class NavItem(BaseModel):
    summary: ObjectSummary
    list_views: list[ListViewRef] = Field(default_factory=list)


class LayoutInfo(BaseModel):
    sections: list[dict[str, Any]]  # {"label", "columns", "fields"} (readable fields only)
    related_lists: list[str]


class ObjectInfo(BaseModel):
    describe: ObjectDescribe
    list_views: list[ListViewRef]
    layout: LayoutInfo


class ListColumn(BaseModel):
    path: str
    label: str
    type: str
    sortable: bool = True


class ListFilter(BaseModel):
    field: str
    operator: str
    values: list[str]


class ListSort(BaseModel):
    field: str
    descending: bool


class ListRow(BaseModel):
    id: str
    values: dict[str, Any]  # column path -> value
    editable: bool
    deletable: bool


class ListResult(BaseModel):
    object: str
    list_view: str
    label: str
    createable: bool
    columns: list[ListColumn]
    filters: list[ListFilter]
    sort: list[ListSort]
    total_size: int
    start: int
    page_size: int
    rows: list[ListRow]
