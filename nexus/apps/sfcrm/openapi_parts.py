"""The building blocks of the dialect's OpenAPI document (openapi.py): answers, parameters,
operations, the component schemas several areas share, and `Area`, one group of resources.

An area is a function answering its paths and the component schemas only it names; the
document is the union of the areas it lists (`openapi.AREAS`), and a name two areas both
define is an error when the document is built, not a silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus.apps.sfcrm.context import LATEST_VERSION

Schema = dict[str, Any]
BASE = "/services/data/{version}"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


ERRORS = ref("Errors")
OBJECT: Schema = {"type": "object"}
STRING: Schema = {"type": "string"}
BOOLEAN: Schema = {"type": "boolean"}
COUNT: Schema = {"type": "integer", "minimum": 0}
NULLABLE_STRING: Schema = {"type": "string", "nullable": True}
RECORD = ref("Record")
SAVE_RESULT = ref("SaveResult")
QUERY_RESULT = ref("QueryResult")
#: Salesforce's date/time on the wire: `2026-05-06T07:08:09.000+0000` (no colon in the zone).
SF_DATETIME: Schema = {
    "type": "string",
    "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}[+-]\d{4}$",
}
NO_CONTENT = {"204": {"description": "done"}}
RECORD_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"type": "object", "maxProperties": 20}}},
}


@dataclass(frozen=True)
class Area:
    """One group of the dialect's resources: its paths and the schemas only they name."""

    paths: dict[str, Any]
    schemas: dict[str, Schema] = field(default_factory=dict)


def obj(required: tuple[str, ...] = (), /, **properties: Schema) -> Schema:
    """An object schema: the properties the code answers, `required` those it always does."""
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def array(items: Schema, **bounds: Any) -> Schema:
    return {"type": "array", "items": items, **bounds}


def json_answer(schema: Schema, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def json_body(schema: Schema, example: Any = None) -> dict[str, Any]:
    """A required JSON body; `example` is one the fuzzer's examples phase sends."""
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"required": True, "content": {"application/json": media}}


def param(
    name: str,
    where: str = "path",
    example: str | None = None,
    *,
    examples: tuple[str, ...] = (),
    required: bool | None = None,
    **schema: Any,
) -> dict[str, Any]:
    """A string parameter (`schema` narrows it); path parameters are always required.
    `examples` are values the fuzzer's examples phase sends, each once."""
    found = {
        "name": name,
        "in": where,
        "required": where == "path" if required is None else required,
        "schema": {"type": "string", **schema},
    }
    if example is not None:
        found["example"] = example
    if examples:
        found["examples"] = {value: {"value": value} for value in examples}
    return found


def integer_param(name: str, *, minimum: int, maximum: int | None = None) -> dict[str, Any]:
    schema: Schema = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    return {"name": name, "in": "query", "required": False, "schema": schema}


NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_]{0,39}$"
VERSION = param("version", enum=[f"v{LATEST_VERSION}.0", "v59.0"])
#: Sales objects and system objects (read-only projections: ADR 0074).
SOBJECT = param(
    "sobject", examples=("Account", "Contact", "User", "Organization"), pattern=NAME_PATTERN
)
RECORD_ID = param("id", pattern="^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$")
FIELD = param("field", example="Ext_Id__c", pattern=NAME_PATTERN)
#: `columns=true`: the query's column metadata instead of its rows (`sf data query`).
COLUMNS = param("columns", "query", enum=["true", "false"])


def operation(
    summary: str,
    answers: dict[str, dict[str, Any]],
    *,
    parameters: list[dict[str, Any]],
    body: dict[str, Any] | None = None,
    errors: tuple[str, ...] = ("400", "401", "403", "404"),
) -> dict[str, Any]:
    """An operation with its answers; every error status it can give answers `Errors` unless
    `answers` names another shape for it."""
    responses = dict(answers)
    for status in (*errors, "413", "503"):
        responses.setdefault(status, json_answer(ERRORS, "error"))
    found: dict[str, Any] = {
        "summary": summary,
        "parameters": parameters,
        "responses": responses,
        "security": [{"bearer": []}],
    }
    if body is not None:
        found["requestBody"] = body
    return found


def shared_schemas() -> dict[str, Schema]:
    """What more than one area names."""
    return {
        "Errors": array(
            obj(
                ("message", "errorCode"),
                message=STRING,
                errorCode=STRING,
                fields=array(STRING),
            ),
            minItems=1,
        ),
        "SaveResult": obj(
            ("success", "errors"),
            id=NULLABLE_STRING,
            success=BOOLEAN,
            errors=array(OBJECT),
            created=BOOLEAN,
        ),
        "Record": obj(
            ("attributes",),
            attributes=obj(("type",), type=STRING, url=STRING),
        ),
        "QueryResult": obj(
            ("totalSize", "done", "records"),
            totalSize=COUNT,
            done=BOOLEAN,
            records=array(OBJECT),
            nextRecordsUrl=STRING,
        ),
        "ObjectSummary": obj(
            ("name", "label", "labelPlural", "urls"),
            name=STRING,
            label=STRING,
            labelPlural=STRING,
            keyPrefix=NULLABLE_STRING,
            custom=BOOLEAN,
            createable=BOOLEAN,
            updateable=BOOLEAN,
            deletable=BOOLEAN,
            queryable=BOOLEAN,
            urls={"type": "object", "additionalProperties": NULLABLE_STRING},
        ),
        "ObjectInfo": obj(
            ("objectDescribe", "recentItems"),
            objectDescribe=ref("ObjectSummary"),
            recentItems=array(RECORD),
        ),
        "DescribeGlobal": obj(
            ("encoding", "maxBatchSize", "sobjects"),
            encoding=STRING,
            maxBatchSize={"type": "integer"},
            sobjects=array(ref("ObjectSummary")),
        ),
        "Describe": obj(
            ("name", "fields", "childRelationships"),
            name=STRING,
            fields=array(obj(("name", "type"), name=STRING, type=STRING)),
            childRelationships=array(OBJECT),
        ),
        "ColumnMetadata": obj(
            ("columnMetadata", "entityName", "groupBy", "idSelected", "keyPrefix"),
            columnMetadata=array(ref("Column")),
            entityName=STRING,
            groupBy=BOOLEAN,
            idSelected=BOOLEAN,
            keyPrefix=NULLABLE_STRING,
        ),
        "Column": obj(
            (
                "aggregate",
                "apexType",
                "booleanType",
                "columnName",
                "custom",
                "displayName",
                "foreignKeyName",
                "insertable",
                "joinColumns",
                "numberType",
                "textType",
                "updatable",
            ),
            aggregate=BOOLEAN,
            apexType=NULLABLE_STRING,
            booleanType=BOOLEAN,
            columnName=STRING,
            custom=BOOLEAN,
            displayName=STRING,
            foreignKeyName=NULLABLE_STRING,
            insertable=BOOLEAN,
            joinColumns=array(ref("Column")),
            numberType=BOOLEAN,
            textType=BOOLEAN,
            updatable=BOOLEAN,
        ),
    }
