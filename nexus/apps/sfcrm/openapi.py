"""The OpenAPI document of the dialect (`GET /services/data/openapi.json`).

Written by hand from the endpoints: the handlers parse their requests themselves (the
dialect's error shapes, not FastAPI's), so there is nothing for FastAPI to generate from.
Every operation documents the error answers it can give; schemathesis checks the running
dialect against this document (tests/e2e/test_sfcrm_clients.py).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from nexus.apps.sfcrm.context import LATEST_VERSION

ERRORS = {"$ref": "#/components/schemas/Errors"}
OBJECT = {"type": "object"}
RECORD = {"$ref": "#/components/schemas/Record"}
SAVE_RESULT = {"$ref": "#/components/schemas/SaveResult"}
RECORD_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"type": "object", "maxProperties": 20}}},
}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _param(
    name: str, where: str = "path", example: str | None = None, **schema: Any
) -> dict[str, Any]:
    param = {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": {"type": "string", **schema},
    }
    if example is not None:
        param["example"] = example
    return param


VERSION = _param("version", enum=[f"v{LATEST_VERSION}.0", "v59.0"])
SOBJECT = _param("sobject", example="Account", pattern="^[A-Za-z][A-Za-z0-9_]{0,39}$")
RECORD_ID = _param("id", pattern="^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$")
FIELD = _param("field", example="Ext_Id__c", pattern="^[A-Za-z][A-Za-z0-9_]{0,39}$")


def _operation(
    summary: str,
    answers: dict[str, dict[str, Any]],
    *,
    parameters: list[dict[str, Any]],
    body: dict[str, Any] | None = None,
    errors: tuple[str, ...] = ("400", "401", "403", "404"),
) -> dict[str, Any]:
    responses = dict(answers)
    for status in (*errors, "413", "503"):
        responses.setdefault(status, _json(ERRORS, "error"))
    operation: dict[str, Any] = {
        "summary": summary,
        "parameters": parameters,
        "responses": responses,
        "security": [{"bearer": []}],
    }
    if body is not None:
        operation["requestBody"] = body
    return operation


def _paths() -> dict[str, Any]:
    base = "/services/data/{version}"
    no_content = {"204": {"description": "done"}}
    records_body = {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "allOrNone": {"type": "boolean"},
                        "records": {"type": "array", "items": OBJECT, "maxItems": 200},
                    },
                    "required": ["records"],
                }
            }
        },
    }
    results = _json({"type": "array", "items": SAVE_RESULT})
    q = _param("q", "query", example="SELECT Id, Name FROM Account")
    query_result = _json({"$ref": "#/components/schemas/QueryResult"})
    several = _json({"type": "array", "items": {"type": "string"}})  # 300: the records' urls
    external_id = [VERSION, SOBJECT, FIELD, _param("value", pattern="^[A-Za-z0-9_-]{1,40}$")]
    q["required"] = True
    return {
        "/services/data": {
            "get": {
                "summary": "API versions",
                "responses": {"200": _json({"type": "array", "items": OBJECT})},
            }
        },
        base: {"get": _operation("Resources", {"200": _json(OBJECT)}, parameters=[VERSION])},
        f"{base}/sobjects": {
            "get": _operation(
                "describeGlobal",
                {"200": _json({"$ref": "#/components/schemas/DescribeGlobal"})},
                parameters=[VERSION],
            )
        },
        f"{base}/sobjects/{{sobject}}": {
            "get": _operation("Object info", {"200": _json(OBJECT)}, parameters=[VERSION, SOBJECT]),
            "post": _operation(
                "Create a record",
                {"201": _json(SAVE_RESULT)},
                parameters=[VERSION, SOBJECT],
                body=RECORD_BODY,
            ),
        },
        f"{base}/sobjects/{{sobject}}/describe": {
            "get": _operation(
                "Describe an object",
                {"200": _json({"$ref": "#/components/schemas/Describe"})},
                parameters=[VERSION, SOBJECT],
            )
        },
        f"{base}/sobjects/{{sobject}}/{{id}}": {
            "get": _operation(
                "Read a record",
                {"200": _json(RECORD)},
                parameters=[VERSION, SOBJECT, RECORD_ID, _param("fields", "query")],
            ),
            "patch": _operation(
                "Update a record",
                no_content,
                parameters=[VERSION, SOBJECT, RECORD_ID],
                body=RECORD_BODY,
            ),
            "delete": _operation(
                "Delete a record", no_content, parameters=[VERSION, SOBJECT, RECORD_ID]
            ),
        },
        f"{base}/sobjects/{{sobject}}/{{field}}/{{value}}": {
            "get": _operation(
                "Read a record by external id",
                {"200": _json(RECORD), "300": several},
                parameters=external_id,
            ),
            "patch": _operation(
                "Upsert a record by external id",
                {"200": _json(SAVE_RESULT), "201": _json(SAVE_RESULT), **no_content},
                parameters=external_id,
                body=RECORD_BODY,
            ),
            "delete": _operation(
                "Delete a record by external id",
                {**no_content, "300": several},
                parameters=external_id,
            ),
        },
        f"{base}/query": {
            "get": _operation("SOQL query", {"200": query_result}, parameters=[VERSION, q])
        },
        f"{base}/queryAll": {
            "get": _operation(
                "SOQL query with deleted records", {"200": query_result}, parameters=[VERSION, q]
            )
        },
        f"{base}/query/{{locator}}": {
            "get": _operation(
                "The next page of a query",
                {"200": query_result},
                parameters=[VERSION, _param("locator", pattern="^[A-Za-z0-9_-]{1,200}$")],
            )
        },
        f"{base}/search": {
            "get": _operation("SOSL search", {"200": _json(OBJECT)}, parameters=[VERSION, q])
        },
        f"{base}/parameterizedSearch": {
            "get": _operation(
                "Search by term",
                {"200": _json(OBJECT)},
                parameters=[VERSION, q, _param("sobject", "query")],
            )
        },
        f"{base}/composite/sobjects": {
            "post": _operation(
                "Create records", {"200": results}, parameters=[VERSION], body=records_body
            ),
            "patch": _operation(
                "Update records", {"200": results}, parameters=[VERSION], body=records_body
            ),
            "delete": _operation(
                "Delete records",
                {"200": results},
                parameters=[
                    VERSION,
                    {**_param("ids", "query"), "required": True},
                    _param("allOrNone", "query"),
                ],
            ),
        },
        f"{base}/composite/sobjects/{{sobject}}": {
            "post": _operation(
                "Retrieve records",
                {"200": _json({"type": "array", "items": {"oneOf": [RECORD, {"type": "null"}]}})},
                parameters=[VERSION, SOBJECT],
                body={
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "ids": {"type": "array", "items": {"type": "string"}},
                                    "fields": {"type": "array", "items": {"type": "string"}},
                                },
                                "required": ["ids", "fields"],
                            }
                        }
                    },
                },
            )
        },
        f"{base}/composite/sobjects/{{sobject}}/{{field}}": {
            "patch": _operation(
                "Upsert records",
                {"200": results},
                parameters=[VERSION, SOBJECT, FIELD],
                body=records_body,
            )
        },
        f"{base}/composite": {
            "post": _operation(
                "Composite request",
                {"200": _json(OBJECT)},
                parameters=[VERSION],
                body={
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "allOrNone": {"type": "boolean"},
                                    "compositeRequest": {
                                        "type": "array",
                                        "maxItems": 25,
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "method": {
                                                    "enum": ["GET", "POST", "PATCH", "DELETE"]
                                                },
                                                "url": {"type": "string"},
                                                "referenceId": {"type": "string"},
                                                "body": OBJECT,
                                            },
                                            "required": ["method", "url", "referenceId"],
                                        },
                                    },
                                },
                                "required": ["compositeRequest"],
                            }
                        }
                    },
                },
            )
        },
        f"{base}/limits": {
            "get": _operation("Limits", {"200": _json(OBJECT)}, parameters=[VERSION])
        },
    }


def _schemas() -> dict[str, Any]:
    nullable_string = {"type": "string", "nullable": True}
    return {
        "Errors": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "errorCode": {"type": "string"},
                    "fields": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["message", "errorCode"],
            },
        },
        "SaveResult": {
            "type": "object",
            "properties": {
                "id": nullable_string,
                "success": {"type": "boolean"},
                "errors": {"type": "array", "items": OBJECT},
                "created": {"type": "boolean"},
            },
            "required": ["success", "errors"],
        },
        "Record": {
            "type": "object",
            "properties": {
                "attributes": {
                    "type": "object",
                    "properties": {"type": {"type": "string"}, "url": {"type": "string"}},
                    "required": ["type"],
                }
            },
            "required": ["attributes"],
        },
        "QueryResult": {
            "type": "object",
            "properties": {
                "totalSize": {"type": "integer", "minimum": 0},
                "done": {"type": "boolean"},
                "records": {"type": "array", "items": OBJECT},
                "nextRecordsUrl": {"type": "string"},
            },
            "required": ["totalSize", "done", "records"],
        },
        "DescribeGlobal": {
            "type": "object",
            "properties": {
                "encoding": {"type": "string"},
                "maxBatchSize": {"type": "integer"},
                "sobjects": {"type": "array", "items": OBJECT},
            },
            "required": ["encoding", "maxBatchSize", "sobjects"],
        },
        "Describe": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "fields": {"type": "array", "items": OBJECT},
                "childRelationships": {"type": "array", "items": OBJECT},
            },
            "required": ["name", "fields", "childRelationships"],
        },
    }


@cache
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Nexus sfcrm: the Salesforce REST dialect",
            "version": f"{LATEST_VERSION}.0",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
