"""The OpenAPI document of the dialect (`GET /services/data/openapi.json`).

Written by hand from the endpoints: the handlers parse their requests themselves (the
dialect's error shapes, not FastAPI's), so there is nothing for FastAPI to generate from.
Every operation documents the error answers it can give; schemathesis checks the running
dialect against this document (tests/e2e/test_sfcrm_clients.py).

The document is the union of `AREAS`, one function per group of resources (this module:
the directory, records, queries and composites; openapi_setup.py: replication, recent
items, layouts, list views, search suggestions and the Tooling API). A new group, such as
the Bulk API 2.0's `jobs/...`, is one more function answering an `Area`, listed in `AREAS`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from nexus.apps.sfcrm.context import LATEST_VERSION
from nexus.apps.sfcrm.openapi_parts import (
    BASE,
    BOOLEAN,
    COLUMNS,
    FIELD,
    NO_CONTENT,
    OBJECT,
    QUERY_RESULT,
    RECORD,
    RECORD_BODY,
    RECORD_ID,
    SAVE_RESULT,
    SOBJECT,
    STRING,
    VERSION,
    Area,
    array,
    json_answer,
    json_body,
    obj,
    operation,
    param,
    ref,
    shared_schemas,
)
from nexus.apps.sfcrm.openapi_setup import replication, setup, tooling

SEVERAL = json_answer(array(STRING))  # 300: the urls of the records an external id names
TREE_EXAMPLE = {
    "attributes": {"type": "Account", "referenceId": "acme"},
    "Name": "Tree Acme",
    "Contacts": {
        "records": [{"attributes": {"type": "Contact", "referenceId": "ada"}, "LastName": "Ada"}]
    },
}


def directory() -> Area:
    return Area(
        paths={
            "/services/data": {
                "get": {
                    "summary": "API versions",
                    "responses": {
                        "200": json_answer(
                            array(
                                obj(
                                    ("label", "url", "version"),
                                    label=STRING,
                                    url=STRING,
                                    version=STRING,
                                )
                            )
                        )
                    },
                }
            },
            BASE: {
                "get": operation(
                    "Resources",
                    {"200": json_answer(obj(("sobjects", "identity"), sobjects=STRING))},
                    parameters=[VERSION],
                )
            },
            f"{BASE}/limits": {
                "get": operation("Limits", {"200": json_answer(OBJECT)}, parameters=[VERSION])
            },
        }
    )


def records() -> Area:
    """sObject resources: describe, CRUD, external ids, and relationship reads."""
    external_id = [VERSION, SOBJECT, FIELD, param("value", pattern="^[A-Za-z0-9_-]{1,40}$")]
    return Area(
        paths={
            f"{BASE}/sobjects": {
                "get": operation(
                    "describeGlobal",
                    {"200": json_answer(ref("DescribeGlobal"))},
                    parameters=[VERSION],
                )
            },
            f"{BASE}/sobjects/{{sobject}}": {
                "get": operation(
                    "Object info and the caller's recent items of it",
                    {"200": json_answer(ref("ObjectInfo"))},
                    parameters=[VERSION, SOBJECT],
                ),
                "post": operation(
                    "Create a record",
                    {"201": json_answer(SAVE_RESULT)},
                    parameters=[VERSION, SOBJECT],
                    body=RECORD_BODY,
                ),
            },
            f"{BASE}/sobjects/{{sobject}}/describe": {
                "get": operation(
                    "Describe an object",
                    {"200": json_answer(ref("Describe"))},
                    parameters=[VERSION, SOBJECT],
                )
            },
            f"{BASE}/sobjects/{{sobject}}/{{id}}": {
                "get": operation(
                    "Read a record",
                    {"200": json_answer(RECORD)},
                    parameters=[VERSION, SOBJECT, RECORD_ID, param("fields", "query")],
                ),
                "patch": operation(
                    "Update a record",
                    NO_CONTENT,
                    parameters=[VERSION, SOBJECT, RECORD_ID],
                    body=RECORD_BODY,
                ),
                "delete": operation(
                    "Delete a record", NO_CONTENT, parameters=[VERSION, SOBJECT, RECORD_ID]
                ),
            },
            # one path for two resources: a second segment that is a record id (a digit
            # among its 15 or 18 characters) reads a relationship (relationships.py)
            f"{BASE}/sobjects/{{sobject}}/{{field}}/{{value}}": {
                "get": operation(
                    "Read a record by external id, or a record's parent or children",
                    {
                        "200": json_answer({"anyOf": [RECORD, QUERY_RESULT]}),
                        "300": SEVERAL,
                    },
                    parameters=[*external_id, param("fields", "query")],
                ),
                "patch": operation(
                    "Upsert a record by external id",
                    {
                        "200": json_answer(SAVE_RESULT),
                        "201": json_answer(SAVE_RESULT),
                        **NO_CONTENT,
                    },
                    parameters=external_id,
                    body=RECORD_BODY,
                ),
                "delete": operation(
                    "Delete a record by external id",
                    {**NO_CONTENT, "300": SEVERAL},
                    parameters=external_id,
                ),
            },
        }
    )


def queries() -> Area:
    q = param("q", "query", example="SELECT Id, Name FROM Account", required=True)
    options = param(
        "Sforce-Query-Options", "header", example="batchSize=200", pattern="^batchSize=[0-9]{1,4}$"
    )
    rows_or_columns = json_answer({"anyOf": [QUERY_RESULT, ref("ColumnMetadata")]})
    locator = param("locator", pattern="^[A-Za-z0-9_-]{1,200}$")
    search = json_answer(obj(("searchRecords",), searchRecords=array(RECORD)))
    return Area(
        paths={
            f"{BASE}/query": {
                "get": operation(
                    "SOQL query (or its columns' metadata)",
                    {"200": rows_or_columns},
                    parameters=[VERSION, q, COLUMNS, options],
                )
            },
            f"{BASE}/queryAll": {
                "get": operation(
                    "SOQL query with deleted records (or its columns' metadata)",
                    {"200": rows_or_columns},
                    parameters=[VERSION, q, COLUMNS, options],
                )
            },
            f"{BASE}/query/{{locator}}": {
                "get": operation(
                    "The next page of a query",
                    {"200": json_answer(QUERY_RESULT)},
                    parameters=[VERSION, locator],
                )
            },
            f"{BASE}/queryAll/{{locator}}": {
                "get": operation(
                    "The next page of a queryAll",
                    {"200": json_answer(QUERY_RESULT)},
                    parameters=[VERSION, locator],
                )
            },
            f"{BASE}/search": {
                "get": operation("SOSL search", {"200": search}, parameters=[VERSION, q])
            },
            f"{BASE}/parameterizedSearch": {
                "get": operation(
                    "Search by term",
                    {"200": search},
                    parameters=[
                        VERSION,
                        q,
                        param("sobject", "query"),
                        param("overallLimit", "query", pattern="^[0-9]{1,4}$"),
                    ],
                )
            },
        }
    )


def composites() -> Area:
    """sObject Collections, `/composite`, `composite/batch` and `composite/tree`."""
    records_body = json_body(
        obj(
            ("records",),
            allOrNone=BOOLEAN,
            records=array(OBJECT, maxItems=200),
        )
    )
    results = json_answer(array(SAVE_RESULT))
    retrieved = json_answer(array({"oneOf": [RECORD, {"type": "null"}]}))  # null: not visible
    names = {"type": "string", "pattern": "^[A-Za-z0-9_,. ]{1,200}$"}
    method = {"enum": ["GET", "POST", "PATCH", "DELETE"]}
    tree_record = obj(
        ("attributes",),
        attributes=obj(("type", "referenceId"), type=STRING, referenceId=STRING),
    )
    return Area(
        paths={
            f"{BASE}/composite/sobjects": {
                "post": operation(
                    "Create records", {"200": results}, parameters=[VERSION], body=records_body
                ),
                "patch": operation(
                    "Update records", {"200": results}, parameters=[VERSION], body=records_body
                ),
                "delete": operation(
                    "Delete records",
                    {"200": results},
                    parameters=[
                        VERSION,
                        param("ids", "query", required=True),
                        param("allOrNone", "query"),
                    ],
                ),
            },
            f"{BASE}/composite/sobjects/{{sobject}}": {
                "get": operation(
                    "Retrieve records (ids and fields in the query string)",
                    {"200": retrieved},
                    parameters=[
                        VERSION,
                        SOBJECT,
                        {**param("ids", "query", required=True), "schema": names},
                        {**param("fields", "query", required=True), "schema": names},
                    ],
                ),
                "post": operation(
                    "Retrieve records",
                    {"200": retrieved},
                    parameters=[VERSION, SOBJECT],
                    body=json_body(obj(("ids", "fields"), ids=array(STRING), fields=array(STRING))),
                ),
            },
            f"{BASE}/composite/sobjects/{{sobject}}/{{field}}": {
                "patch": operation(
                    "Upsert records",
                    {"200": results},
                    parameters=[VERSION, SOBJECT, FIELD],
                    body=records_body,
                )
            },
            f"{BASE}/composite": {
                "post": operation(
                    "Composite request",
                    {"200": json_answer(ref("CompositeResult"))},
                    parameters=[VERSION],
                    body=json_body(
                        obj(
                            ("compositeRequest",),
                            allOrNone=BOOLEAN,
                            compositeRequest=array(
                                obj(
                                    ("method", "url", "referenceId"),
                                    method=method,
                                    url=STRING,
                                    referenceId=STRING,
                                    body=OBJECT,
                                ),
                                maxItems=25,
                            ),
                        )
                    ),
                )
            },
            f"{BASE}/composite/batch": {
                "post": operation(
                    "Independent subrequests",
                    {"200": json_answer(ref("BatchResult"))},
                    parameters=[VERSION],
                    body=json_body(
                        obj(
                            ("batchRequests",),
                            haltOnError=BOOLEAN,
                            batchRequests=array(
                                obj(
                                    ("method", "url"),
                                    method={"enum": [*method["enum"], "PUT"]},
                                    url={"type": "string", "example": "v62.0/limits"},
                                    richInput=OBJECT,
                                ),
                                minItems=1,
                                maxItems=25,
                            ),
                        ),
                        example={
                            "batchRequests": [
                                {"method": "GET", "url": f"v{LATEST_VERSION}.0/limits"},
                                {"method": "GET", "url": f"v{LATEST_VERSION}.0/recent?limit=2"},
                            ]
                        },
                    ),
                )
            },
            f"{BASE}/composite/tree/{{sobject}}": {
                "post": operation(
                    "Create records with their children, all or none",
                    {
                        "201": json_answer(ref("TreeCreated")),
                        "400": json_answer({"anyOf": [ref("Errors"), ref("TreeFailed")]}),
                    },
                    parameters=[VERSION, SOBJECT],
                    body=json_body(
                        obj(("records",), records=array(tree_record, minItems=1, maxItems=200)),
                        example={"records": [TREE_EXAMPLE]},
                    ),
                )
            },
        },
        schemas={
            "CompositeResult": obj(
                ("compositeResponse",),
                compositeResponse=array(
                    obj(
                        ("body", "httpStatusCode", "referenceId"),
                        body={},
                        httpHeaders=OBJECT,
                        httpStatusCode={"type": "integer"},
                        referenceId=STRING,
                    )
                ),
            ),
            "BatchResult": obj(
                ("hasErrors", "results"),
                hasErrors=BOOLEAN,
                results=array(
                    obj(("statusCode", "result"), statusCode={"type": "integer"}, result={}),
                    maxItems=25,
                ),
            ),
            "TreeCreated": obj(
                ("hasErrors", "results"),
                hasErrors={"type": "boolean", "enum": [False]},
                results=array(obj(("referenceId", "id"), referenceId=STRING, id=STRING)),
            ),
            "TreeFailed": obj(
                ("hasErrors", "results"),
                hasErrors={"type": "boolean", "enum": [True]},
                results=array(
                    obj(
                        ("referenceId", "errors"),
                        referenceId=STRING,
                        errors=array(
                            obj(
                                ("statusCode", "message"),
                                statusCode=STRING,
                                message=STRING,
                                fields=array(STRING),
                            ),
                            minItems=1,
                        ),
                    ),
                    minItems=1,
                ),
            ),
        },
    )


#: Every group of resources the document describes, in the order it lists them.
AREAS: tuple[Callable[[], Area], ...] = (
    directory,
    records,
    queries,
    composites,
    replication,
    setup,
    tooling,
)


def _union(areas: list[Area]) -> tuple[dict[str, Any], dict[str, Any]]:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = dict(shared_schemas())
    for area in areas:
        for name, value in area.paths.items():
            if name in paths:
                raise ValueError(f"two areas describe the path {name}")
            paths[name] = value
        for name, value in area.schemas.items():
            if name in schemas:
                raise ValueError(f"two areas define the schema {name}")
            schemas[name] = value
    return paths, schemas


@cache
def openapi_document() -> dict[str, Any]:
    paths, schemas = _union([area() for area in AREAS])
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Nexus sfcrm: the Salesforce REST dialect",
            "version": f"{LATEST_VERSION}.0",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
