"""`/tooling`: the Tooling API's metadata objects CLIs and IDEs ask for, over Nexus describe.

`EntityDefinition` (the objects) and `FieldDefinition` (an object's fields) are projected from
Runtime's describe answers (`describe/global`, `describe/object`: only what the caller may
see), so a query costs one Runtime call. `tooling/query` takes the SOQL subset such clients
send (`SELECT fields FROM X [WHERE f = 'v' [AND ...]] [ORDER BY f [ASC|DESC]] [LIMIT n]`,
with `=`, `!=`, `IN (...)` and `LIKE`); a FieldDefinition query names its object, as
Salesforce requires. Any other tooling object is `INVALID_TYPE` in a query and `NOT_FOUND` as
a resource (the `sf` CLI asks `tooling/sobjects/SourceMember/describe` to learn whether an
org tracks source, and reads NOT_FOUND as "no").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import SfError, bad_request, not_found
from nexus.apps.sfcrm.params import whole_number
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.contracts.describe import FieldDescribe, ObjectDescribe, ObjectSummary

router = APIRouter(prefix="/services/data/{version}/tooling")

MAX_QUERY = 20_000
#: The most digits a number literal has (a double has 17 significant ones).
MAX_NUMBER = 40
ENTITY, FIELD = "EntityDefinition", "FieldDefinition"
OBJECTS = (ENTITY, FIELD)
#: Nexus field type -> (FieldDefinition.DataType template, ValueTypeId)
DATA_TYPES: dict[str, tuple[str, str]] = {
    "text": ("Text({length})", "string"),
    "textarea": ("Text Area({length})", "string"),
    "long_text": ("Long Text Area({length})", "string"),
    "email": ("Email", "string"),
    "phone": ("Phone", "string"),
    "url": ("URL({length})", "string"),
    "number": ("Number({digits}, {scale})", "double"),
    "currency": ("Currency({digits}, {scale})", "double"),
    "percent": ("Percent({digits}, {scale})", "double"),
    "checkbox": ("Checkbox", "boolean"),
    "date": ("Date", "date"),
    "datetime": ("Date/Time", "datetime"),
    "picklist": ("Picklist", "string"),
    "multi_picklist": ("Picklist (Multi-Select)", "string"),
    "lookup": ("Lookup({target})", "id"),
    "master_detail": ("Master-Detail({target})", "id"),
    "auto_number": ("Auto Number", "string"),
    "formula": ("Formula", "string"),
}
SYSTEM_TYPES = {"id": ("Lookup()", "id"), "reference": ("Lookup(User)", "id")}
SYSTEM_TYPES |= {"boolean": ("Checkbox", "boolean"), "datetime": ("Date/Time", "datetime")}


# ---------------------------------------------------------------------------- rows


def _attributes(version: str, kind: str, durable_id: str) -> dict[str, str]:
    return {"type": kind, "url": f"{wire.base(version)}/tooling/sobjects/{kind}/{durable_id}"}


def entity_row(version: str, s: ObjectSummary) -> dict[str, Any]:
    return {
        "attributes": _attributes(version, ENTITY, s.name),
        "Id": "000000000000000AAA",
        "DurableId": s.name,
        "QualifiedApiName": s.name,
        "DeveloperName": s.name.removesuffix("__c"),
        "MasterLabel": s.label,
        "Label": s.label,
        "PluralLabel": s.label_plural,
        "KeyPrefix": s.key_prefix,
        "NamespacePrefix": None,
        "IsCustomizable": True,
        "IsCustomSetting": False,
        "IsQueryable": s.queryable,
        "IsSearchable": True,
        "IsLayoutable": True,
        "IsRetrieveable": True,
        "IsTriggerable": True,
        "IsApexTriggerable": True,
        "IsEverCreatable": s.createable,
        "IsEverUpdatable": s.updateable,
        "IsEverDeletable": s.deletable,
        "IsDeprecatedAndHidden": False,
        "IsFeedEnabled": False,
        "IsWorkflowEnabled": False,
    }


def _data_type(f: FieldDescribe) -> tuple[str, str]:
    template, value_type = DATA_TYPES.get(f.type, ("Text({length})", "string"))
    precision = f.precision or 18
    scale = f.scale or 0
    text = template.format(
        length=f.length or 255,
        digits=precision - scale,
        scale=scale,
        target=", ".join(f.reference_to),
    )
    return text, value_type


def field_row(version: str, obj: ObjectSummary, f: FieldDescribe) -> dict[str, Any]:
    data_type, value_type = _data_type(f)
    return _field_row(
        version,
        obj,
        name=f.name,
        label=f.label,
        data_type=data_type,
        value_type=value_type,
        extra={
            "Length": f.length or 0,
            "Precision": f.precision or 0,
            "Scale": f.scale or 0,
            "IsNillable": f.nillable,
            "IsCalculated": f.calculated,
            "IsNameField": f.name_field,
            "IsUnique": f.unique,
            "IsExternalId": f.external_id,
            "IsFieldHistoryTracked": f.track_history,
            "ReferenceTo": {"referenceTo": list(f.reference_to)} if f.reference_to else None,
            "RelationshipName": f.relationship_name,
        },
    )


def system_field_row(
    version: str, obj: ObjectSummary, system: tuple[str, str, str, list[str]]
) -> dict[str, Any]:
    name, label, kind, targets = system
    data_type, value_type = SYSTEM_TYPES.get(kind, ("Text(255)", "string"))
    return _field_row(
        version,
        obj,
        name=name,
        label=label,
        data_type=data_type,
        value_type=value_type,
        extra={
            "Length": 18 if value_type == "id" else 0,
            "Precision": 0,
            "Scale": 0,
            "IsNillable": name not in ("Id", "IsDeleted"),
            "IsCalculated": False,
            "IsNameField": False,
            "IsUnique": name == "Id",
            "IsExternalId": False,
            "IsFieldHistoryTracked": False,
            "ReferenceTo": {"referenceTo": targets} if targets else None,
            "RelationshipName": wire.SYSTEM_RELATIONSHIPS.get(name),
        },
    )


def _field_row(
    version: str,
    obj: ObjectSummary,
    *,
    name: str,
    label: str,
    data_type: str,
    value_type: str,
    extra: dict[str, Any],
) -> dict[str, Any]:
    durable = f"{obj.name}.{name}"
    return {
        "attributes": _attributes(version, FIELD, durable),
        "Id": "000000000000000AAA",
        "DurableId": durable,
        "QualifiedApiName": name,
        "DeveloperName": name.removesuffix("__c"),
        "MasterLabel": label,
        "Label": label,
        "DataType": data_type,
        "ValueTypeId": value_type,
        "NamespacePrefix": None,
        "EntityDefinitionId": obj.name,
        "EntityDefinition": entity_row(version, obj),
        "IsApiFilterable": True,
        "IsApiSortable": True,
        "IsApiGroupable": True,
        "IsCompound": False,
        "IsHighScaleNumber": False,
        "IsHtmlFormatted": False,
        "IsIndexed": name == "Id",
        "IsPolymorphicForeignKey": False,
        "IsWorkflowFilterable": True,
        "Description": None,
        "InlineHelpText": None,
        **extra,
    }


def field_rows(version: str, d: ObjectDescribe) -> list[dict[str, Any]]:
    own = {f.name for f in d.fields}
    system = [
        system_field_row(version, d.summary, s) for s in wire.SYSTEM_FIELDS if s[0] not in own
    ]
    return system + [field_row(version, d.summary, f) for f in d.fields]


# ---------------------------------------------------------------------------- the SOQL subset

TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^'\\]|\\.)*')|(?P<number>-?[0-9]+(?:\.[0-9]+)?)"
    r"|(?P<op>!=|<>|=|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)


@dataclass
class Condition:
    path: str
    operator: str  # "=", "!=", "in", "like"
    values: list[Any]


@dataclass
class ToolingQuery:
    fields: list[str]
    source: str
    where: list[Condition] = field(default_factory=list)
    order: tuple[str, bool] | None = None  # (path, descending)
    limit: int | None = None


def malformed(message: str) -> SfError:
    return bad_request("MALFORMED_QUERY", message)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, position = [], 0
    text = text.strip()
    while position < len(text):
        match = TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise malformed(f"unexpected token at position {position + 1}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    return out


class _Reader:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise malformed("unexpected end of query")
        self.at += 1
        return token

    def keyword(self, *words: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "word" and token[1].upper() in words:
            self.at += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.keyword(word):
            raise malformed(f"expected {word}")

    def word(self) -> str:
        kind, value = self.take()
        if kind != "word":
            raise malformed(f"unexpected {value!r}")
        return value

    def literal(self) -> Any:
        kind, value = self.take()
        if kind == "string":
            return re.sub(r"\\(.)", r"\1", value[1:-1])
        if kind == "number":
            if len(value) > MAX_NUMBER:
                raise malformed(f"a number has at most {MAX_NUMBER} digits")
            return float(value) if "." in value else int(value)
        if kind == "word" and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if kind == "word" and value.lower() == "null":
            return None
        raise malformed(f"unexpected {value!r}")


def parse(text: str) -> ToolingQuery:
    if len(text) > MAX_QUERY:
        raise malformed(f"a query is at most {MAX_QUERY} characters")
    r = _Reader(_tokens(text))
    r.expect("SELECT")
    fields = [r.word()]
    while r.peek() == ("op", ","):
        r.take()
        fields.append(r.word())
    r.expect("FROM")
    query = ToolingQuery(fields=fields, source=r.word())
    if r.keyword("WHERE"):
        query.where.append(_condition(r))
        while r.keyword("AND"):
            query.where.append(_condition(r))
    if r.keyword("ORDER"):
        r.expect("BY")
        path = r.word()
        descending = r.keyword("DESC")
        if not descending:
            r.keyword("ASC")
        query.order = (path, descending)
    if r.keyword("LIMIT"):
        kind, value = r.take()
        limit = whole_number(value) if kind == "number" else None
        if limit is None:
            raise malformed("LIMIT takes a whole number")
        query.limit = limit
    if r.peek() is not None:
        raise malformed(f"unexpected {r.take()[1]!r}")
    return query


def _condition(r: _Reader) -> Condition:
    path = r.word()
    if r.keyword("IN"):
        if r.take() != ("op", "("):
            raise malformed("IN takes a list in parentheses")
        values = [r.literal()]
        while r.peek() == ("op", ","):
            r.take()
            values.append(r.literal())
        if r.take() != ("op", ")"):
            raise malformed("IN takes a list in parentheses")
        return Condition(path, "in", values)
    if r.keyword("LIKE"):
        return Condition(path, "like", [r.literal()])
    kind, value = r.take()
    if kind != "op" or value not in ("=", "!=", "<>"):
        raise malformed(f"unsupported operator {value!r}")
    return Condition(path, "=" if value == "=" else "!=", [r.literal()])


def _value(row: dict[str, Any], path: str) -> Any:
    current: Any = row
    for part in path.split("."):
        if not isinstance(current, dict):
            return None
        current = next((v for k, v in current.items() if k.lower() == part.lower()), None)
    return current


def _has(row: dict[str, Any], path: str) -> bool:
    current: Any = row
    for part in path.split("."):
        if not isinstance(current, dict):
            return False
        key = next((k for k in current if k.lower() == part.lower()), None)
        if key is None or key == "attributes":
            return False
        current = current[key]
    return True


def _same(value: Any, wanted: Any) -> bool:
    if isinstance(value, str) and isinstance(wanted, str):
        return value.lower() == wanted.lower()
    return bool(value == wanted)


def like(value: Any, pattern: Any) -> bool:
    """SOQL LIKE, case-insensitive: `%` any run of characters, `_` one character. A
    two-pointer match (at most length x pattern steps), never a regex built from input."""
    if not isinstance(value, str):
        return False
    text, wanted = value.lower(), str(pattern).lower()
    t = w = 0
    star, mark = -1, 0
    while t < len(text):
        if w < len(wanted) and wanted[w] in ("_", text[t]) and wanted[w] != "%":
            t, w = t + 1, w + 1
        elif w < len(wanted) and wanted[w] == "%":
            star, mark, w = w, t, w + 1
        elif star >= 0:
            mark += 1
            t, w = mark, star + 1
        else:
            return False
    return all(c == "%" for c in wanted[w:])


def _matches(row: dict[str, Any], c: Condition) -> bool:
    value = _value(row, c.path)
    if c.operator == "in":
        return any(_same(value, v) for v in c.values)
    if c.operator == "like":
        return like(value, c.values[0])
    equal = _same(value, c.values[0])
    return equal if c.operator == "=" else not equal


def _project(row: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"attributes": row["attributes"]}
    for path in paths:
        head, _, rest = path.partition(".")
        key = next(k for k in row if k.lower() == head.lower())
        if not rest:
            out[key] = row[key]
            continue
        nested = out.setdefault(key, {"attributes": row[key]["attributes"]})
        nested.update(_project(row[key], [rest]))
    return out


def _sort_key(value: Any) -> tuple[int, float, str]:
    """Numbers by value, text case-insensitively, nulls first (SOQL's NULLS FIRST)."""
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    return (2, 0.0, str(value).lower())


def check_columns(query: ToolingQuery, sample: dict[str, Any]) -> None:
    """Every column the query names (selected, filtered, ordered by) is one `sample` has:
    an unknown one is INVALID_FIELD whether or not any row matches."""
    order = [query.order[0]] if query.order is not None else []
    for path in [*query.fields, *(c.path for c in query.where), *order]:
        if not _has(sample, path):
            raise bad_request(
                "INVALID_FIELD", f"No such column '{path}' on entity '{query.source}'"
            )


def run(
    query: ToolingQuery, rows: list[dict[str, Any]], sample: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows the query picks, projected; its columns checked against `sample` (a row
    with every column: the first row when not given)."""
    sample = sample if sample is not None else (rows[0] if rows else None)
    if sample is not None:
        check_columns(query, sample)
    chosen = [r for r in rows if all(_matches(r, c) for c in query.where)]
    if query.order is not None:
        path, descending = query.order
        chosen.sort(key=lambda r: _sort_key(_value(r, path)), reverse=descending)
    if query.limit is not None:
        chosen = chosen[: query.limit]
    return [_project(r, query.fields) for r in chosen]


ENTITY_PATHS = frozenset(
    {"entitydefinitionid", "entitydefinition.qualifiedapiname", "entitydefinition.durableid"}
)


def _entity_filter(query: ToolingQuery) -> str:
    """The object a FieldDefinition query is about (Salesforce requires one)."""
    for c in query.where:
        value = c.values[0] if c.operator == "=" else None
        if c.path.lower() in ENTITY_PATHS and isinstance(value, str) and value:
            return value
    raise malformed(
        "a FieldDefinition query needs a filter on EntityDefinition.QualifiedApiName "
        "or EntityDefinitionId"
    )


def _column(name: str, value: Any, rest: str) -> dict[str, Any]:
    """One column of `query?columns=true` (what `sf data query` asks to lay out its table);
    a relationship path (`EntityDefinition.QualifiedApiName`) joins its field."""
    joined = bool(rest)
    head, _, below = rest.partition(".")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    apex = (
        None
        if joined
        else ("Boolean" if isinstance(value, bool) else "Integer" if number else "String")
    )
    return {
        "aggregate": False,
        "apexType": apex,
        "booleanType": isinstance(value, bool),
        "columnName": name,
        "custom": False,
        "displayName": name,
        "foreignKeyName": None,
        "insertable": False,
        "joinColumns": [_column(head, _value(value, head), below)] if joined else [],
        "numberType": number,
        "textType": apex == "String",
        "updatable": False,
    }


def column_metadata(query: ToolingQuery, source: str, sample: dict[str, Any]) -> dict[str, Any]:
    """The selected columns' metadata (the query's columns checked: `check_columns`)."""
    columns = []
    for path in query.fields:
        head, _, rest = path.partition(".")
        key = next(k for k in sample if k.lower() == head.lower())
        columns.append(_column(key, sample[key], rest))
    return {
        "columnMetadata": columns,
        "entityName": source,
        "groupBy": False,
        "idSelected": any(p.lower() == "id" for p in query.fields),
        "keyPrefix": None,
    }


# ---------------------------------------------------------------------------- resources


async def _summaries(request: Request, caller: Caller) -> list[ObjectSummary]:
    answer = await dialect(request).runtime.call(caller, "describe/global", {})
    return [ObjectSummary.model_validate(s) for s in answer]


async def _describe(request: Request, caller: Caller, name: str) -> ObjectDescribe:
    answer = await dialect(request).runtime.call(caller, "describe/object", {"object": name})
    return ObjectDescribe.model_validate(answer)


def _kind(name: str) -> str:
    found = next((o for o in OBJECTS if o.lower() == name.lower()), None)
    if found is None:
        raise not_found()
    return found


def _tooling_summary(version: str, name: str) -> dict[str, Any]:
    root = f"{wire.base(version)}/tooling/sobjects/{name}"
    return {
        "name": name,
        "label": "Entity Definition" if name == ENTITY else "Field Definition",
        "labelPlural": "Entity Definitions" if name == ENTITY else "Field Definitions",
        "keyPrefix": None,
        "custom": False,
        "createable": False,
        "updateable": False,
        "deletable": False,
        "undeletable": False,
        "queryable": True,
        "retrieveable": True,
        "searchable": False,
        "layoutable": False,
        "urls": {"sobject": root, "describe": f"{root}/describe", "rowTemplate": f"{root}/{{ID}}"},
    }


SAMPLE_OBJECT = ObjectSummary(
    name="Account",
    label="Account",
    label_plural="Accounts",
    key_prefix="001",
    custom=False,
    createable=False,
    updateable=False,
    deletable=False,
)


def _field_type(key: str, value: Any) -> str:
    if key == "EntityDefinition":
        return "reference"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    return "complexvalue" if isinstance(value, dict) else "string"


def _sample_row(version: str, name: str) -> dict[str, Any]:
    """A row of the object with every column (what its describe and columns show)."""
    if name == ENTITY:
        return entity_row(version, SAMPLE_OBJECT)
    empty = ObjectDescribe(
        summary=SAMPLE_OBJECT, sharing_model="ReadWrite", fields=[], child_relationships=[]
    )
    return field_rows(version, empty)[0]


def _tooling_describe(version: str, name: str) -> dict[str, Any]:
    """The object's fields, as its rows have them (read-only: Nexus metadata changes
    through Catalog releases, not the Tooling API)."""
    sample = _sample_row(version, name)
    fields = [
        {
            "name": "EntityDefinitionId" if key == "EntityDefinition" else key,
            "label": key,
            "type": _field_type(key, value),
            "nillable": not isinstance(value, bool),
            "createable": False,
            "updateable": False,
            "filterable": True,
            "sortable": True,
            "relationshipName": "EntityDefinition" if key == "EntityDefinition" else None,
            "referenceTo": [ENTITY] if key == "EntityDefinition" else [],
        }
        for key, value in sample.items()
        if key != "attributes"
    ]
    return {**_tooling_summary(version, name), "fields": fields, "childRelationships": []}


@router.get("")
async def tooling_resources(request: Request, version: str) -> Response:
    """The Tooling API's resource map: the resources this dialect serves."""
    d = dialect(request)
    await d.enter(request, version)
    root = f"{wire.base(version)}/tooling"
    return d.reply(request, {"sobjects": f"{root}/sobjects", "query": f"{root}/query"})


@router.get("/sobjects")
async def tooling_sobjects(request: Request, version: str) -> Response:
    d = dialect(request)
    await d.enter(request, version)
    body = {
        "encoding": "UTF-8",
        "maxBatchSize": 200,
        "sobjects": [_tooling_summary(version, name) for name in OBJECTS],
    }
    return d.reply(request, body)


@router.get("/sobjects/{name}")
async def tooling_sobject(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    await d.enter(request, version)
    body = {"objectDescribe": _tooling_summary(version, _kind(name)), "recentItems": []}
    return d.reply(request, body)


@router.get("/sobjects/{name}/describe")
async def tooling_describe(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    await d.enter(request, version)
    return d.reply(request, _tooling_describe(version, _kind(name)))


@router.get("/query")
async def tooling_query(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    text = request.query_params.get("q")
    if not text:
        raise malformed("give the query in q")
    query = parse(text)
    source = next((o for o in OBJECTS if o.lower() == query.source.lower()), None)
    if source is None:
        raise bad_request("INVALID_TYPE", f"sObject type '{query.source}' is not supported.")
    if source == ENTITY:
        rows = [entity_row(version, s) for s in await _summaries(request, caller)]
    else:
        try:
            rows = field_rows(version, await _describe(request, caller, _entity_filter(query)))
        except SfError as exc:
            if exc.status != 404:
                raise
            rows = []  # an object the caller cannot see has no fields for them
    sample = rows[0] if rows else _sample_row(version, source)
    if request.query_params.get("columns", "").lower() == "true":
        check_columns(query, sample)
        return d.reply(request, column_metadata(query, source, sample))
    records = run(query, rows, sample)
    body = {
        "size": len(records),
        "totalSize": len(records),
        "done": True,
        "queryLocator": None,
        "entityTypeName": source,
        "records": records,
    }
    return d.reply(request, body)
