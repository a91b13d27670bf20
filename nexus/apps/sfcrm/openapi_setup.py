"""Areas of the dialect's OpenAPI document (openapi.py) for the resources around records:
data replication and recent items (changes.py), describe layouts (layouts.py), list views
(list_views.py), search suggestions and scope order (suggestions.py), and the Tooling API
(tooling.py). Shapes are those the handlers answer, which follow Salesforce's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nexus.apps.sfcrm.openapi_parts import (
    BASE,
    BOOLEAN,
    COLUMNS,
    COUNT,
    NAME_PATTERN,
    NULLABLE_STRING,
    OBJECT,
    RECORD,
    SF_DATETIME,
    SOBJECT,
    STRING,
    VERSION,
    Area,
    array,
    integer_param,
    json_answer,
    obj,
    operation,
    param,
    ref,
)

NULLABLE_INTEGER = {"type": "integer", "nullable": True}


def _moment(name: str, at: datetime) -> dict[str, Any]:
    return param(
        name, "query", at.strftime("%Y-%m-%dT%H:%M:%SZ"), required=True, format="date-time"
    )


def replication() -> Area:
    """Get Updated / Get Deleted (a window of at most 30 days back) and recent items. The
    window's examples are around the day the document is built (once a process), so they
    are in range."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    window = [VERSION, SOBJECT, _moment("start", today - timedelta(days=1))]
    window.append(_moment("end", today + timedelta(days=1)))
    return Area(
        paths={
            f"{BASE}/sobjects/{{sobject}}/updated": {
                "get": operation(
                    "The ids of the records changed in a window",
                    {"200": json_answer(ref("UpdatedResult"))},
                    parameters=window,
                )
            },
            f"{BASE}/sobjects/{{sobject}}/deleted": {
                "get": operation(
                    "The records deleted in a window",
                    {"200": json_answer(ref("DeletedResult"))},
                    parameters=window,
                )
            },
            f"{BASE}/recent": {
                "get": operation(
                    "The caller's most recently changed records it may still read",
                    {"200": json_answer(array(ref("RecentItem"), maxItems=200))},
                    parameters=[VERSION, integer_param("limit", minimum=1)],
                )
            },
        },
        schemas={
            "UpdatedResult": obj(
                ("ids", "latestDateCovered"), ids=array(STRING), latestDateCovered=SF_DATETIME
            ),
            "DeletedResult": obj(
                ("deletedRecords", "earliestDateAvailable", "latestDateCovered"),
                deletedRecords=array(
                    obj(("id", "deletedDate"), id=STRING, deletedDate=SF_DATETIME)
                ),
                earliestDateAvailable=SF_DATETIME,
                latestDateCovered=SF_DATETIME,
            ),
            "RecentItem": obj(
                ("attributes", "Id", "Name"),
                attributes=obj(("type", "url"), type=STRING, url=STRING),
                Id=STRING,
                Name=NULLABLE_STRING,
            ),
        },
    )


def setup() -> Area:
    """Describe layouts, list views, search suggestions and the search scope order."""
    view = param("listview", example="All_Accounts", pattern="^[A-Za-z_][A-Za-z0-9_]{0,79}$")
    record_type = param(
        "recordTypeId", example="012000000000000AAA", pattern=r"^[A-Za-z0-9]{15,18}$"
    )
    views = f"{BASE}/sobjects/{{sobject}}/listviews"
    return Area(
        paths={
            f"{BASE}/sobjects/{{sobject}}/describe/layouts": {
                "get": operation(
                    "An object's layouts and record type mappings",
                    {"200": json_answer(ref("DescribeLayouts"))},
                    parameters=[VERSION, SOBJECT],
                )
            },
            f"{BASE}/sobjects/{{sobject}}/describe/layouts/{{recordTypeId}}": {
                "get": operation(
                    "The layout of a record type",
                    {"200": json_answer(ref("DescribeLayout"))},
                    parameters=[VERSION, SOBJECT, record_type],
                )
            },
            views: {
                "get": operation(
                    "An object's list views",
                    {"200": json_answer(ref("ListViews"))},
                    parameters=[VERSION, SOBJECT],
                )
            },
            f"{views}/{{listview}}": {
                "get": operation(
                    "A list view's basic information",
                    {"200": json_answer(ref("ListView"))},
                    parameters=[VERSION, SOBJECT, view],
                )
            },
            f"{views}/{{listview}}/describe": {
                "get": operation(
                    "A list view's columns, filters, order and SOQL",
                    {"200": json_answer(ref("ListViewDescribe"))},
                    parameters=[VERSION, SOBJECT, view],
                )
            },
            f"{views}/{{listview}}/results": {
                "get": operation(
                    "A list view's rows",
                    {"200": json_answer(ref("ListViewResults"))},
                    parameters=[
                        VERSION,
                        SOBJECT,
                        view,
                        integer_param("limit", minimum=1, maximum=2000),
                        integer_param("offset", minimum=0, maximum=2000),
                    ],
                )
            },
            f"{BASE}/search/suggestions": {
                "get": operation(
                    "Records whose names start with a term (typeahead)",
                    {"200": json_answer(ref("Suggestions"))},
                    parameters=[
                        VERSION,
                        param("q", "query", "Acme", required=True),
                        param("sobject", "query", "Account", required=True),
                        integer_param("limit", minimum=1, maximum=50),
                    ],
                )
            },
            f"{BASE}/search/scopeOrder": {
                "get": operation(
                    "The objects global search covers, in order",
                    {"200": json_answer(array(obj(("type", "url"), type=STRING, url=STRING)))},
                    parameters=[VERSION],
                )
            },
        },
        schemas=_setup_schemas(),
    )


def _setup_schemas() -> dict[str, Any]:
    section = obj(
        ("heading", "columns", "rows", "layoutRows"),
        heading=STRING,
        columns={"type": "integer", "minimum": 1},
        rows=COUNT,
        layoutRows=array(
            obj(
                ("layoutItems", "numItems"),
                layoutItems=array(
                    obj(
                        ("label", "layoutComponents"),
                        label=STRING,
                        editableForNew=BOOLEAN,
                        editableForUpdate=BOOLEAN,
                        required=BOOLEAN,
                        layoutComponents=array(
                            obj(("type", "value"), type=STRING, value=STRING, details=OBJECT)
                        ),
                    )
                ),
                numItems=COUNT,
            )
        ),
    )
    list_column = obj(
        ("fieldNameOrPath", "label", "type", "sortable"),
        fieldNameOrPath=STRING,
        label=STRING,
        type=STRING,
        sortable=BOOLEAN,
        hidden=BOOLEAN,
        searchable=BOOLEAN,
        selectListItem=STRING,
        sortDirection={"type": "string", "nullable": True, "enum": ["ascending", "descending"]},
        sortIndex=NULLABLE_INTEGER,
    )
    return {
        "DescribeLayouts": obj(
            ("layouts", "recordTypeMappings", "recordTypeSelectorRequired"),
            layouts=array(ref("DescribeLayout"), minItems=1),
            recordTypeMappings=array(
                obj(
                    ("recordTypeId", "layoutId", "name", "master"),
                    recordTypeId=STRING,
                    layoutId=STRING,
                    name=STRING,
                    master=BOOLEAN,
                    picklistsForRecordType=array(
                        obj(
                            ("picklistName", "picklistValues"),
                            picklistName=STRING,
                            picklistValues=array(OBJECT),
                        )
                    ),
                )
            ),
            recordTypeSelectorRequired=array(BOOLEAN),
        ),
        "DescribeLayout": obj(
            ("id", "detailLayoutSections", "editLayoutSections", "relatedLists"),
            id=STRING,
            detailLayoutSections=array(section),
            editLayoutSections=array(section),
            relatedLists=array(
                obj(
                    ("name", "sobject", "columns"),
                    name=STRING,
                    sobject=STRING,
                    columns=array(OBJECT),
                )
            ),
            buttonLayoutSection=OBJECT,
        ),
        "ListViews": obj(
            ("done", "listviews", "size", "sobjectType"),
            done=BOOLEAN,
            listviews=array(ref("ListView")),
            nextRecordsUrl=NULLABLE_STRING,
            size=COUNT,
            sobjectType=STRING,
        ),
        "ListView": obj(
            ("id", "developerName", "label", "url", "describeUrl", "resultsUrl"),
            id=STRING,
            developerName=STRING,
            label=STRING,
            url=STRING,
            describeUrl=STRING,
            resultsUrl=STRING,
            soqlCompatible=BOOLEAN,
        ),
        "ListViewDescribe": obj(
            ("id", "columns", "orderBy", "query", "sobjectType", "whereCondition"),
            id=STRING,
            columns=array(list_column),
            orderBy=array(
                obj(
                    ("fieldNameOrPath", "sortDirection"),
                    fieldNameOrPath=STRING,
                    sortDirection=STRING,
                    nullsPosition=STRING,
                )
            ),
            query=STRING,
            scope=STRING,
            sobjectType=STRING,
            whereCondition=obj(
                ("conditions", "conjunction"), conditions=array(OBJECT), conjunction=STRING
            ),
        ),
        "ListViewResults": obj(
            ("id", "developerName", "label", "done", "size", "columns", "records"),
            id=STRING,
            developerName=STRING,
            label=STRING,
            done=BOOLEAN,
            size=COUNT,
            columns=array(list_column),
            records=array(
                obj(
                    ("columns",),
                    columns=array(
                        obj(
                            ("fieldNameOrPath", "value"),
                            fieldNameOrPath=STRING,
                            value=NULLABLE_STRING,
                        )
                    ),
                )
            ),
        ),
        "Suggestions": obj(
            ("autoSuggestResults", "hasMoreResults"),
            autoSuggestResults=array(ref("RecentItem")),
            hasMoreResults=BOOLEAN,
        ),
    }


def tooling() -> Area:
    """The Tooling API's EntityDefinition and FieldDefinition (read-only)."""
    name = param("sobject", examples=("EntityDefinition", "FieldDefinition"), pattern=NAME_PATTERN)
    q = param(
        "q",
        "query",
        required=True,
        examples=(
            "SELECT QualifiedApiName, Label FROM EntityDefinition ORDER BY QualifiedApiName",
            "SELECT QualifiedApiName, DataType FROM FieldDefinition "
            "WHERE EntityDefinition.QualifiedApiName = 'Account'",
        ),
    )
    root = f"{BASE}/tooling"
    return Area(
        paths={
            root: {
                "get": operation(
                    "The Tooling API's resources",
                    {"200": json_answer(obj(("sobjects", "query"), sobjects=STRING, query=STRING))},
                    parameters=[VERSION],
                )
            },
            f"{root}/sobjects": {
                "get": operation(
                    "The Tooling API's objects",
                    {"200": json_answer(ref("DescribeGlobal"))},
                    parameters=[VERSION],
                )
            },
            f"{root}/sobjects/{{sobject}}": {
                "get": operation(
                    "A Tooling API object",
                    {"200": json_answer(ref("ObjectInfo"))},
                    parameters=[VERSION, name],
                )
            },
            f"{root}/sobjects/{{sobject}}/describe": {
                "get": operation(
                    "Describe a Tooling API object",
                    {"200": json_answer(ref("Describe"))},
                    parameters=[VERSION, name],
                )
            },
            f"{root}/query": {
                "get": operation(
                    "A Tooling API query (or its columns' metadata)",
                    {
                        "200": json_answer(
                            {"anyOf": [ref("ToolingQueryResult"), ref("ColumnMetadata")]}
                        )
                    },
                    parameters=[VERSION, q, COLUMNS],
                )
            },
        },
        schemas={
            "ToolingQueryResult": obj(
                ("size", "totalSize", "done", "entityTypeName", "records"),
                size=COUNT,
                totalSize=COUNT,
                done=BOOLEAN,
                queryLocator=NULLABLE_STRING,
                entityTypeName=STRING,
                records=array(RECORD),
            )
        },
    )
