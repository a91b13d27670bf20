"""Metadata definitions (objects and fields) and their validation.

A batch is validated as a whole against the currently active definitions; every problem is
reported with the path of the offending entry (`objects[2].fields[0].type`), and nothing of an
invalid batch is stored.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nexus.runtime.formula.compiler import FormulaError, compile_formula

FieldType = Literal[
    "text",
    "textarea",
    "long_text",
    "email",
    "phone",
    "url",
    "number",
    "currency",
    "percent",
    "checkbox",
    "date",
    "datetime",
    "picklist",
    "multi_picklist",
    "lookup",
    "master_detail",
    "auto_number",
    "formula",
]
SharingModel = Literal["Private", "Read", "ReadWrite", "ControlledByParent"]

API_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*(?:__c)?$")
MAX_NAME = 40
#: Names of the system fields every object has; no definition may reuse them.
SYSTEM_FIELDS = (
    "Id",
    "OwnerId",
    "CreatedById",
    "CreatedDate",
    "LastModifiedById",
    "LastModifiedDate",
    "SystemModstamp",
    "IsDeleted",
)
RESERVED = frozenset(
    name.lower()
    for name in (
        *SYSTEM_FIELDS,
        "org_id",
        "row_version",
        "select",
        "from",
        "where",
        "and",
        "or",
        "not",
        "null",
        "order",
        "group",
        "by",
        "limit",
        "offset",
        "having",
        "table",
        "index",
        "true",
        "false",
        "like",
        "in",
        "is",
        "update",
        "delete",
        "insert",
        "create",
        "drop",
        "alter",
        "join",
        "union",
        "all",
        "desc",
        "asc",
        "key",
        "primary",
        "default",
        # not "type": Salesforce's standard `Type` fields need it; it is no SOQL or formula
        # keyword here and every physical column name is quoted by SQLAlchemy (ADR 0034)
        "user",
        "group",
        "rows",
        "fields",
    )
)
#: Key prefixes the platform itself uses (identity ids).
RESERVED_PREFIXES = frozenset({"00D", "005", "0Ak", "00E"})

UNIQUE_CAPABLE = ("text", "email", "number", "auto_number", "phone", "url")
#: At most this many fields compose one name (a person's: salutation, first, middle, last, suffix).
MAX_PARTS = 5
_STRICT = ConfigDict(extra="forbid", frozen=True)
Name = Annotated[str, Field(min_length=1)]


class PicklistValue(BaseModel):
    model_config = _STRICT

    value: Name
    label: str | None = None
    default: bool = False
    active: bool = True


class FieldDef(BaseModel):
    model_config = _STRICT

    api_name: Name
    label: Name
    type: FieldType
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    values: tuple[PicklistValue, ...] | None = None
    restricted: bool = False
    reference_to: str | None = None
    relationship_name: str | None = None
    child_relationship_name: str | None = None
    on_delete: Literal["set_null", "restrict", "cascade"] | None = None
    required: bool = False
    unique: bool = False
    external_id: bool = False
    format: str | None = None  # auto-number, e.g. "INV-{0000}"
    default_value: Any = None
    track_history: bool = False
    description: str | None = None
    formula: Annotated[str, Field(max_length=3900)] | None = None  # for type formula
    return_type: Literal["number", "text", "boolean", "date", "datetime"] | None = None
    #: A composed text name (Salesforce's Contact/Lead `Name`): the non-empty values of these
    #: text fields of the object joined by one space, set on save unless the save sets it.
    composed_of: Annotated[tuple[Name, ...], Field(min_length=1, max_length=MAX_PARTS)] | None = (
        None
    )

    @model_validator(mode="after")
    def _shape(self) -> FieldDef:
        checks = (
            _lengths,
            _numbers,
            _picklists,
            _references,
            _auto_numbers,
            _uniques,
            _formulas,
            _compositions,
        )
        for check in checks:
            check(self)
        return self

    @property
    def effective_precision(self) -> tuple[int, int]:
        precision = self.precision if self.precision is not None else 18
        scale = self.scale if self.scale is not None else (2 if self.type == "currency" else 0)
        return precision, scale


def _lengths(f: FieldDef) -> None:
    if f.type == "text":
        if f.length is None or not 1 <= f.length <= 255:
            raise ValueError("text needs length 1-255")
    elif f.length is not None and f.type not in ("textarea", "long_text"):
        raise ValueError(f"{f.type} takes no length")


def _numbers(f: FieldDef) -> None:
    if f.type in ("number", "currency", "percent"):
        precision, scale = f.effective_precision
        if not 1 <= precision <= 18 or not 0 <= scale <= precision:
            raise ValueError("precision is 1-18 and scale 0-precision")
    elif f.precision is not None or f.scale is not None:
        raise ValueError(f"{f.type} takes no precision or scale")


def _picklists(f: FieldDef) -> None:
    if f.type not in ("picklist", "multi_picklist"):
        if f.values is not None:
            raise ValueError(f"{f.type} takes no values")
        return
    if not f.values:
        raise ValueError(f"{f.type} needs values")
    names = [v.value for v in f.values]
    if len(set(names)) != len(names):
        raise ValueError("picklist values must be unique")
    if f.type == "picklist" and sum(v.default for v in f.values) > 1:
        raise ValueError("a picklist has at most one default value")


def _references(f: FieldDef) -> None:
    if f.type not in ("lookup", "master_detail"):
        if f.reference_to or f.relationship_name or f.on_delete:
            raise ValueError(f"{f.type} takes no reference_to, relationship_name or on_delete")
        return
    if not f.reference_to:
        raise ValueError(f"{f.type} needs reference_to")
    if not f.relationship_name:
        raise ValueError(f"{f.type} needs relationship_name")
    allowed = ("cascade",) if f.type == "master_detail" else ("set_null", "restrict")
    if f.on_delete is not None and f.on_delete not in allowed:
        raise ValueError(f"{f.type} on_delete must be one of {', '.join(allowed)}")


def _auto_numbers(f: FieldDef) -> None:
    if f.type == "auto_number":
        if not f.format or not re.search(r"\{0+\}", f.format):
            raise ValueError("auto_number needs a format such as 'INV-{0000}'")
    elif f.format is not None:
        raise ValueError(f"{f.type} takes no format")


def _formulas(f: FieldDef) -> None:
    if f.type == "formula":
        if not f.formula or not f.return_type:
            raise ValueError("a formula field needs a formula and a return_type")
        if f.required or f.default_value is not None or f.track_history:
            raise ValueError("a formula field is computed: no required, default or history")
    elif f.formula is not None or f.return_type is not None:
        raise ValueError(f"{f.type} takes no formula or return_type")


def _uniques(f: FieldDef) -> None:
    if (f.unique or f.external_id) and f.type not in UNIQUE_CAPABLE:
        raise ValueError(f"{f.type} cannot be unique or an external id")


def _compositions(f: FieldDef) -> None:
    if f.composed_of is None:
        return
    if f.type != "text":
        raise ValueError(f"{f.type} cannot be composed_of other fields (text only)")
    if f.default_value is not None:
        raise ValueError("a composed field is set from its parts: no default_value")


class ObjectDef(BaseModel):
    model_config = _STRICT

    api_name: Name
    label: Name
    plural_label: Name
    key_prefix: str = Field(pattern=r"^[0-9A-Za-z]{3}$")
    sharing_model: SharingModel = "Private"
    name_field: FieldDef
    fields: tuple[FieldDef, ...] = ()
    description: str | None = None

    @model_validator(mode="after")
    def _name_field(self) -> ObjectDef:
        if self.name_field.api_name != "Name":
            raise ValueError("the name field's api_name is 'Name'")
        if self.name_field.type not in ("text", "auto_number"):
            raise ValueError("the name field is text or auto_number")
        return self

    def all_fields(self) -> tuple[FieldDef, ...]:
        return (self.name_field, *self.fields)


class ObjectPermission(BaseModel):
    model_config = _STRICT

    object: Name
    create: bool = False
    read: bool = False
    edit: bool = False
    delete: bool = False
    view_all: bool = False
    modify_all: bool = False
    #: Baseline field-level security for every field of the object (entries refine it).
    all_fields: Literal["none", "read", "edit"] = "none"

    @model_validator(mode="after")
    def _implied(self) -> ObjectPermission:
        if (self.edit or self.create or self.delete or self.view_all) and not self.read:
            raise ValueError("create, edit, delete and view_all need read")
        if self.delete and not self.edit:
            raise ValueError("delete needs edit")
        if self.modify_all and not (self.view_all and self.delete):
            raise ValueError("modify_all needs view_all and delete")
        return self


class FieldPermission(BaseModel):
    model_config = _STRICT

    field: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")]  # Object.Field
    read: bool = False
    edit: bool = False

    @model_validator(mode="after")
    def _edit_needs_read(self) -> FieldPermission:
        if self.edit and not self.read:
            raise ValueError("edit needs read")
        return self


class PermissionSetDef(BaseModel):
    model_config = _STRICT

    api_name: Name
    label: Name
    view_all_data: bool = False
    modify_all_data: bool = False
    objects: tuple[ObjectPermission, ...] = ()
    fields: tuple[FieldPermission, ...] = ()


class Criterion(BaseModel):
    model_config = _STRICT

    field: Name
    operator: Literal["equals", "not_equals", "in"] = "equals"
    value: str | int | float | bool | tuple[str, ...]


class SharingRuleDef(BaseModel):
    model_config = _STRICT

    api_name: Name
    label: Name
    object: Name
    criteria: tuple[Criterion, ...] = Field(min_length=1)
    share_with_role: Name
    include_subordinates: bool = False
    access: Literal["Read", "Edit"] = "Read"
    active: bool = True


class LayoutSection(BaseModel):
    model_config = _STRICT

    label: Name
    columns: int = Field(default=2, ge=1, le=4)
    fields: tuple[Name, ...]


class LayoutDef(BaseModel):
    """The record page of an object: ordered sections of fields and the related lists shown."""

    model_config = _STRICT

    api_name: Name
    object: Name
    sections: tuple[LayoutSection, ...] = Field(min_length=1)
    related_lists: tuple[Name, ...] = ()  # child objects, in display order


class ValidationRuleDef(BaseModel):
    """A rule whose formula returns TRUE when the record is invalid."""

    model_config = _STRICT

    api_name: Name
    object: Name
    formula: Annotated[str, Field(min_length=1, max_length=3900)]
    error_message: Annotated[str, Field(min_length=1, max_length=255)]
    error_field: str | None = None
    active: bool = True


class FieldUpdate(BaseModel):
    model_config = _STRICT

    field: Name
    formula: Annotated[str, Field(min_length=1, max_length=3900)]


Formula = Annotated[str, Field(min_length=1, max_length=3900)]
#: An outbound endpoint binding's name (operator-controlled; metadata never holds a URL).
ENDPOINT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
EVENT_NAME = r"^[A-Za-z][A-Za-z0-9_.:-]{0,79}$"
MAX_ACTION_VALUES = 100


class CreateRecordAction(BaseModel):
    """Create a record of `object`, each field set by a formula over the triggering record
    (e.g. a Task whose `WhatId` is `Id`)."""

    model_config = _STRICT

    kind: Literal["create_record"]
    object: Name
    fields: Annotated[dict[str, Formula], Field(min_length=1, max_length=MAX_ACTION_VALUES)]


class UpdateRecordAction(BaseModel):
    """Update the record the triggering record's lookup field `lookup` points to (nothing when
    the lookup is empty), each field set by a formula over the triggering record."""

    model_config = _STRICT

    kind: Literal["update_record"]
    lookup: Name
    fields: Annotated[dict[str, Formula], Field(min_length=1, max_length=MAX_ACTION_VALUES)]


class WebhookAction(BaseModel):
    """POST `{"type": event, "timestamp": ..., "data": {name: formula value}}`, signed in the
    Standard Webhooks format, to the outbound endpoint an operator bound under `endpoint`."""

    model_config = _STRICT

    kind: Literal["webhook"]
    endpoint: Annotated[str, Field(pattern=ENDPOINT_NAME)]
    event: Annotated[str, Field(pattern=EVENT_NAME)]
    payload: Annotated[dict[str, Formula], Field(max_length=MAX_ACTION_VALUES)] = Field(
        default_factory=dict
    )

    @model_validator(mode="before")
    @classmethod
    def _no_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and "url" in data:
            raise ValueError(
                "a webhook names an outbound endpoint an operator bound "
                "(`nexus admin set-outbound-endpoint`), never a URL"
            )
        return data


class OutboxEventAction(BaseModel):
    """The first shape of an after-save action (an event with no destination). Stored
    versions still load and do nothing; new metadata is refused (use `webhook`)."""

    model_config = _STRICT

    kind: Literal["outbox_event"] = "outbox_event"
    event: Name
    payload: dict[str, str] = Field(default_factory=dict)  # name -> formula


AfterSaveAction = Annotated[
    CreateRecordAction | UpdateRecordAction | WebhookAction | OutboxEventAction,
    Field(discriminator="kind"),
]
ACTION_KINDS = ("create_record", "update_record", "webhook", "outbox_event")
MAX_ACTIONS = 10


class FlowDef(BaseModel):
    """A record-triggered flow. Before-save flows set field values inside the mutation
    transaction, before validation, in `order`, and never trigger one another."""

    model_config = _STRICT

    api_name: Name
    object: Name
    when: Literal["before_save", "after_save"] = "before_save"
    trigger: Literal["create", "update", "create_or_update"] = "create_or_update"
    order: int = Field(default=100, ge=0, le=10_000)
    entry_condition: str | None = None
    updates: tuple[FieldUpdate, ...] = ()
    after_save: Annotated[tuple[AfterSaveAction, ...], Field(max_length=MAX_ACTIONS)] = ()
    active: bool = True

    @model_validator(mode="after")
    def _actions(self) -> FlowDef:
        if self.when == "before_save" and (self.after_save or not self.updates):
            raise ValueError("a before-save flow has field updates (and no after-save actions)")
        if self.when == "after_save" and (self.updates or not self.after_save):
            raise ValueError("an after-save flow has after-save actions (and no field updates)")
        return self


FieldPath = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,5}$")
]


class ListViewFilter(BaseModel):
    model_config = _STRICT

    field: FieldPath  # a field or parent path, e.g. Account__r.Name
    operator: Literal[
        "equals",
        "not_equals",
        "less",
        "less_or_equal",
        "greater",
        "greater_or_equal",
        "contains",
        "starts_with",
        "in",
    ]
    value: str | int | float | bool | datetime | date | tuple[str, ...] | None = None


class ListViewSort(BaseModel):
    model_config = _STRICT

    field: FieldPath
    descending: bool = False


class ListViewDef(BaseModel):
    """A saved list of records: columns, filters (all must match) and sort, run as SOQL."""

    model_config = _STRICT

    api_name: Name
    object: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")]
    label: Name
    columns: tuple[FieldPath, ...] = Field(min_length=1, max_length=50)
    filters: tuple[ListViewFilter, ...] = ()
    sort: tuple[ListViewSort, ...] = ()


class MetadataBatch(BaseModel):
    model_config = _STRICT

    objects: tuple[ObjectDef, ...] = ()
    permission_sets: tuple[PermissionSetDef, ...] = ()
    sharing_rules: tuple[SharingRuleDef, ...] = ()
    layouts: tuple[LayoutDef, ...] = ()
    validation_rules: tuple[ValidationRuleDef, ...] = ()
    flows: tuple[FlowDef, ...] = ()
    list_views: tuple[ListViewDef, ...] = ()


class MetadataProblem(BaseModel):
    path: str
    message: str


class InvalidMetadata(Exception):
    def __init__(self, problems: list[MetadataProblem]) -> None:
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in problems[:5]))
        self.problems = problems


def parse_batch(raw: Any) -> MetadataBatch:
    """Shape checks (types, required keys); InvalidMetadata names each offending path."""
    try:
        return MetadataBatch.model_validate(raw)
    except ValidationError as exc:
        raise InvalidMetadata(
            [
                MetadataProblem(
                    path=_path(err["loc"]), message=str(err["msg"]).removeprefix("Value error, ")
                )
                for err in exc.errors()
            ]
        ) from None


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after[_shape()]", "function-after[_name_field()]") and not (
            part in ACTION_KINDS and out.endswith("]")
        ):
            out += f".{part}" if out else str(part)
    return out or "(batch)"


def check_batch(
    batch: MetadataBatch, active: dict[str, ObjectDef], roles: set[str] | None = None
) -> list[MetadataProblem]:
    """Cross-definition rules against the active metadata. Empty list: the batch is valid."""
    problems: list[MetadataProblem] = []

    def problem(path: str, message: str) -> None:
        problems.append(MetadataProblem(path=path, message=message))

    resulting = dict(active)
    seen: set[str] = set()
    for i, obj in enumerate(batch.objects):
        path = f"objects[{i}]"
        key = obj.api_name.lower()
        if key in seen:
            problem(f"{path}.api_name", f"duplicate object {obj.api_name!r} in this batch")
        seen.add(key)
        _check_object(obj, path, resulting, problem)
        if key in active:
            _check_evolution(active[key], obj, path, problem)
        resulting[key] = obj
    for i, obj in enumerate(batch.objects):
        _check_references(obj, f"objects[{i}]", resulting, problem)
    _check_access(batch, resulting, roles, problem)
    return problems


def _field_of(resulting: dict[str, ObjectDef], object_name: str, field: str) -> FieldDef | None:
    obj = resulting.get(object_name.lower())
    if obj is None:
        return None
    return next((f for f in obj.all_fields() if f.api_name.lower() == field.lower()), None)


def _check_access(
    batch: MetadataBatch, resulting: dict[str, ObjectDef], roles: set[str] | None, problem: Any
) -> None:
    for kind, items in (
        ("permission_sets", batch.permission_sets),
        ("sharing_rules", batch.sharing_rules),
    ):
        names = [item.api_name.lower() for item in items]
        for i, name in enumerate(names):
            _check_name(items[i].api_name, f"{kind}[{i}].api_name", problem)
            if name in names[:i]:
                problem(f"{kind}[{i}].api_name", "duplicate name in this batch")
    for i, pset in enumerate(batch.permission_sets):
        _check_permission_set(pset, f"permission_sets[{i}]", resulting, problem)
    for i, rule in enumerate(batch.sharing_rules):
        _check_sharing_rule(rule, f"sharing_rules[{i}]", resulting, roles, problem)
    for i, layout in enumerate(batch.layouts):
        _check_layout(layout, f"layouts[{i}]", resulting, problem)
    for i, validation in enumerate(batch.validation_rules):
        _check_validation_rule(validation, f"validation_rules[{i}]", resulting, problem)
    for i, flow in enumerate(batch.flows):
        _check_flow(flow, f"flows[{i}]", resulting, problem)
    for i, list_view in enumerate(batch.list_views):
        _check_name(list_view.api_name, f"list_views[{i}].api_name", problem)
        if resulting.get(list_view.object.lower()) is None:
            problem(f"list_views[{i}].object", f"no object named {list_view.object!r}")


FORMULA_TYPES = {
    "number": "number",
    "currency": "number",
    "percent": "number",
    "checkbox": "boolean",
    "date": "date",
    "datetime": "datetime",
    "picklist": "picklist",
    "multi_picklist": "multipicklist",
}


#: relationships every record has to a user, with the user fields a path may end in
USER_RELATIONSHIPS = {
    "owner": "owner_id",
    "createdby": "created_by_id",
    "lastmodifiedby": "last_modified_by_id",
}
USER_FIELDS = {"id": "user_id", "name": "display_name", "username": "username", "email": "email"}
MAX_RELATIONSHIP_DEPTH = 5


def relationship(obj: ObjectDef, name: str) -> FieldDef | None:
    """The lookup of `obj` whose relationship is called `name` (`Account` or `Account__r`)."""
    lowered = name.lower()
    return next(
        (
            f
            for f in obj.fields
            if f.type in ("lookup", "master_detail")
            and (f.relationship_name or "").lower() in (lowered, lowered + "__r")
        ),
        None,
    )


#: the system fields a formula may read: formula path -> (stored column, formula type)
FORMULA_SYSTEM_FIELDS = {
    "id": ("id", "text"),
    "ownerid": ("owner_id", "text"),
    "createdbyid": ("created_by_id", "text"),
    "lastmodifiedbyid": ("last_modified_by_id", "text"),
    "createddate": ("created_date", "datetime"),
    "lastmodifieddate": ("last_modified_date", "datetime"),
}


def _own_formula_types(obj: ObjectDef) -> dict[str, str]:
    """The stored fields of `obj` a formula may reference, with their formula types (formula
    fields are not referenceable, so formulas cannot depend on one another)."""
    types = {
        f.api_name.lower(): FORMULA_TYPES.get(f.type, "text")
        for f in obj.all_fields()
        if f.type != "formula"
    }
    types.update({path: kind for path, (_, kind) in FORMULA_SYSTEM_FIELDS.items()})
    return types


class FormulaEnv:
    """What a formula on `obj` may reference: its own stored fields and parent paths through
    lookups (`Account.Owner.Name`, at most five relationships), with their formula types."""

    def __init__(self, obj: ObjectDef, objects: dict[str, ObjectDef]) -> None:
        self.obj = obj
        self.objects = objects

    def get(self, key: str, /) -> str | None:
        parts = key.lower().split(".")
        if len(parts) > MAX_RELATIONSHIP_DEPTH + 1:
            return None
        current = self.obj
        for depth, part in enumerate(parts[:-1]):
            if part in USER_RELATIONSHIPS:
                last = depth == len(parts) - 2
                return "text" if last and parts[-1] in USER_FIELDS else None
            lookup = relationship(current, part)
            parent = self.objects.get((lookup.reference_to or "").lower()) if lookup else None
            if parent is None:
                return None
            current = parent
        return _own_formula_types(current).get(parts[-1])


def formula_env(obj: ObjectDef, objects: dict[str, ObjectDef]) -> FormulaEnv:
    return FormulaEnv(obj, objects)


def _compiles(source: str, env: FormulaEnv, expect: str, path: str, problem: Any) -> None:
    try:
        compile_formula(source, env, expect=expect)
    except FormulaError as exc:
        problem(path, f"line {exc.line}, column {exc.column}: {exc.reason}")


def _check_validation_rule(
    rule: ValidationRuleDef, path: str, resulting: dict[str, ObjectDef], problem: Any
) -> None:
    _check_name(rule.api_name, f"{path}.api_name", problem)
    obj = resulting.get(rule.object.lower())
    if obj is None:
        problem(f"{path}.object", f"no object named {rule.object!r}")
        return
    _compiles(rule.formula, formula_env(obj, resulting), "boolean", f"{path}.formula", problem)
    if rule.error_field and _field_of(resulting, rule.object, rule.error_field) is None:
        problem(f"{path}.error_field", f"no field {rule.error_field!r} on {obj.api_name}")


def _check_flow(flow: FlowDef, path: str, resulting: dict[str, ObjectDef], problem: Any) -> None:
    _check_name(flow.api_name, f"{path}.api_name", problem)
    obj = resulting.get(flow.object.lower())
    if obj is None:
        problem(f"{path}.object", f"no object named {flow.object!r}")
        return
    env = formula_env(obj, resulting)
    if flow.entry_condition:
        _compiles(flow.entry_condition, env, "boolean", f"{path}.entry_condition", problem)
    for j, update in enumerate(flow.updates):
        target = _field_of(resulting, flow.object, update.field)
        if target is None or target.type == "auto_number":
            problem(f"{path}.updates[{j}].field", f"no writable field {update.field!r}")
            continue
        _compiles(
            update.formula,
            env,
            FORMULA_TYPES.get(target.type, "text"),
            f"{path}.updates[{j}].formula",
            problem,
        )
    for j, action in enumerate(flow.after_save):
        _check_action(
            action,
            f"{path}.after_save[{j}]",
            env=env,
            obj=obj,
            resulting=resulting,
            problem=problem,
        )


_ANY = "any"


def _check_action(
    action: CreateRecordAction | UpdateRecordAction | WebhookAction | OutboxEventAction,
    path: str,
    *,
    env: FormulaEnv,
    obj: ObjectDef,
    resulting: dict[str, ObjectDef],
    problem: Any,
) -> None:
    """Every formula type-checked against where its value goes; targets must exist."""
    if isinstance(action, OutboxEventAction):
        problem(f"{path}.kind", "outbox_event is retired: use webhook (with an endpoint name)")
        return
    if isinstance(action, WebhookAction):
        for name, source in action.payload.items():
            _compiles(source, env, _ANY, f"{path}.payload.{name}", problem)
        return
    if isinstance(action, CreateRecordAction):
        target = resulting.get(action.object.lower())
        if target is None:
            problem(f"{path}.object", f"no object named {action.object!r}")
            return
        set_fields = {name.lower() for name in action.fields}
        for needed in target.all_fields():
            required = needed.required or (
                needed.api_name == "Name" and needed.type == "text" and not needed.composed_of
            )
            if required and needed.api_name.lower() not in set_fields:
                problem(f"{path}.fields", f"{target.api_name}.{needed.api_name} is required")
    else:
        lookup = next(
            (
                f
                for f in obj.fields
                if f.api_name.lower() == action.lookup.lower()
                and f.type in ("lookup", "master_detail")
            ),
            None,
        )
        target = resulting.get((lookup.reference_to or "").lower()) if lookup else None
        if target is None:
            problem(f"{path}.lookup", f"no lookup field {action.lookup!r} on {obj.api_name}")
            return
    for name, source in action.fields.items():
        field = _field_of(resulting, target.api_name, name)
        if field is None or field.type in ("auto_number", "formula"):
            problem(f"{path}.fields.{name}", f"no writable field {name!r} on {target.api_name}")
            continue
        _compiles(
            source, env, FORMULA_TYPES.get(field.type, "text"), f"{path}.fields.{name}", problem
        )


def _check_layout(
    layout: LayoutDef, path: str, resulting: dict[str, ObjectDef], problem: Any
) -> None:
    _check_name(layout.api_name, f"{path}.api_name", problem)
    obj = resulting.get(layout.object.lower())
    if obj is None:
        problem(f"{path}.object", f"no object named {layout.object!r}")
        return
    for i, section in enumerate(layout.sections):
        for j, name in enumerate(section.fields):
            if _field_of(resulting, layout.object, name) is None:
                problem(f"{path}.sections[{i}].fields[{j}]", f"no field {name!r} on {obj.api_name}")
    for j, child_name in enumerate(layout.related_lists):
        child = resulting.get(child_name.lower())
        if child is None or not any(
            (f.reference_to or "").lower() == obj.api_name.lower() for f in child.fields
        ):
            problem(
                f"{path}.related_lists[{j}]", f"{child_name!r} is not a child of {obj.api_name}"
            )


def _check_permission_set(
    pset: PermissionSetDef, path: str, resulting: dict[str, ObjectDef], problem: Any
) -> None:
    for j, perm in enumerate(pset.objects):
        if perm.object.lower() not in resulting:
            problem(f"{path}.objects[{j}].object", f"no object named {perm.object!r}")
    for j, fperm in enumerate(pset.fields):
        object_name, field_name = fperm.field.split(".", 1)
        if _field_of(resulting, object_name, field_name) is None:
            problem(f"{path}.fields[{j}].field", f"no field {fperm.field!r}")


def _check_sharing_rule(
    rule: SharingRuleDef,
    path: str,
    resulting: dict[str, ObjectDef],
    roles: set[str] | None,
    problem: Any,
) -> None:
    obj = resulting.get(rule.object.lower())
    if obj is None:
        problem(f"{path}.object", f"no object named {rule.object!r}")
        return
    if obj.sharing_model not in ("Private", "Read"):
        problem(f"{path}.object", f"{obj.api_name} is not Private or Read: nothing to share")
    for j, criterion in enumerate(rule.criteria):
        if _field_of(resulting, rule.object, criterion.field) is None:
            problem(f"{path}.criteria[{j}].field", f"no field {criterion.field!r} on {rule.object}")
    if roles is not None and rule.share_with_role not in roles:
        problem(f"{path}.share_with_role", f"no role named {rule.share_with_role!r}")


def _check_object(obj: ObjectDef, path: str, resulting: dict[str, ObjectDef], problem: Any) -> None:
    _check_name(obj.api_name, f"{path}.api_name", problem)
    if obj.key_prefix in RESERVED_PREFIXES:
        problem(f"{path}.key_prefix", f"key prefix {obj.key_prefix!r} is reserved")
    for other in resulting.values():
        if other.key_prefix == obj.key_prefix and other.api_name.lower() != obj.api_name.lower():
            problem(
                f"{path}.key_prefix", f"key prefix {obj.key_prefix!r} is used by {other.api_name}"
            )
    names: set[str] = set()
    for j, field in enumerate(obj.all_fields()):
        fpath = f"{path}.name_field" if j == 0 else f"{path}.fields[{j - 1}]"
        if j > 0:
            _check_name(field.api_name, f"{fpath}.api_name", problem)
        if field.api_name.lower() in names:
            problem(f"{fpath}.api_name", f"duplicate field {field.api_name!r}")
        names.add(field.api_name.lower())
        if j > 0 and field.composed_of is not None:
            problem(f"{fpath}.composed_of", "only the name field can be composed")
    _check_composition(obj, f"{path}.name_field.composed_of", problem)


def _check_composition(obj: ObjectDef, path: str, problem: Any) -> None:
    """A composed name's parts are distinct text fields of the object, other than the name
    itself (so no part is composed: no cycle), and their values joined fit the name."""
    name = obj.name_field
    if name.composed_of is None:
        return
    fields = {f.api_name.lower(): f for f in obj.fields}
    seen: set[str] = set()
    total = -1  # the parts' lengths and one space between two parts
    for k, part in enumerate(name.composed_of):
        found = fields.get(part.lower())
        if part.lower() in seen:
            problem(f"{path}[{k}]", f"{part!r} is listed twice")
        elif part.lower() == name.api_name.lower():
            problem(f"{path}[{k}]", "the name cannot be composed of itself")
        elif found is None:
            problem(f"{path}[{k}]", f"no field {part!r} on {obj.api_name} to compose the name of")
        elif found.type != "text":
            problem(f"{path}[{k}]", f"{part!r} is {found.type}: a name is composed of text fields")
        else:
            total += 1 + (found.length or 0)
        seen.add(part.lower())
    if total > (name.length or 0):
        problem(
            path,
            f"the parts joined are up to {total} characters: the name's length "
            f"({name.length}) must be at least that",
        )


def _check_references(
    obj: ObjectDef, path: str, resulting: dict[str, ObjectDef], problem: Any
) -> None:
    for j, field in enumerate(obj.fields):
        if field.reference_to and field.reference_to.lower() not in resulting:
            problem(f"{path}.fields[{j}].reference_to", f"no object named {field.reference_to!r}")
    for j, field in enumerate(obj.fields):  # after the batch's objects: formulas read parents
        if field.type == "formula" and field.formula and field.return_type:
            env = formula_env(obj, resulting)
            _compiles(field.formula, env, field.return_type, f"{path}.fields[{j}].formula", problem)
    if obj.sharing_model == "ControlledByParent" and not any(
        f.type == "master_detail" for f in obj.fields
    ):
        problem(f"{path}.sharing_model", "ControlledByParent needs a master-detail field")


def _check_name(name: str, path: str, problem: Any) -> None:
    if len(name) > MAX_NAME:
        problem(path, f"names have at most {MAX_NAME} characters")
    elif not API_NAME.fullmatch(name):
        problem(
            path,
            "names start with a letter, use letters, digits and single '_' (and may end in '__c')",
        )
    elif name.lower() in RESERVED or name.lower().removesuffix("__c") in RESERVED:
        problem(path, f"{name!r} is a reserved word")


def _check_evolution(previous: ObjectDef, new: ObjectDef, path: str, problem: Any) -> None:
    """Phase one is additive: no removed field, no changed type, no changed key prefix."""
    if previous.key_prefix != new.key_prefix:
        problem(f"{path}.key_prefix", "the key prefix of an existing object cannot change")
    new_fields = {f.api_name.lower(): f for f in new.all_fields()}
    for old in previous.all_fields():
        current = new_fields.get(old.api_name.lower())
        if current is None:
            problem(
                f"{path}.fields",
                f"removing field {old.api_name!r} is not supported (additive only)",
            )
            continue
        if current.type != old.type:
            problem(
                f"{path}.fields.{old.api_name}",
                f"changing the type of {old.api_name!r} ({old.type} -> {current.type}) is refused",
            )
        elif _storage(current) != _storage(old):
            problem(
                f"{path}.fields.{old.api_name}",
                f"changing the storage of {old.api_name!r} is refused",
            )
        if current.reference_to != old.reference_to:
            problem(f"{path}.fields.{old.api_name}", "a reference target cannot change")


def _storage(field: FieldDef) -> tuple[Any, ...]:
    return (
        field.type,
        field.length,
        field.effective_precision if field.type in ("number", "currency", "percent") else None,
        field.unique or field.external_id,
    )
