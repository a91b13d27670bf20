"""A list screen's own filters (`{field, operator, values}`), checked against the object's
metadata and the caller's field-level security and turned into list view filters (run as
SOQL by the engine, which binds every value as a parameter)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.errors import BadRequest
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import FieldDef, ListViewFilter, ObjectDef
from nexus.runtime.metadata.view import MetadataView

MAX_FILTERS = 10
MAX_VALUES = 20
MAX_VALUE_LENGTH = 255

_TEXT = ("equals", "contains", "starts_with")
_RANGE = ("equals", "less", "less_or_equal", "greater", "greater_or_equal")
#: Field type -> the operators a user may filter it with.
OPERATORS: dict[str, tuple[str, ...]] = {
    "text": _TEXT,
    "email": _TEXT,
    "phone": _TEXT,
    "url": _TEXT,
    "picklist": ("equals", "in"),
    "number": _RANGE,
    "currency": _RANGE,
    "percent": _RANGE,
    "date": _RANGE,
    "datetime": _RANGE,
    "checkbox": ("equals",),
    "lookup": ("equals",),
    "master_detail": ("equals",),
}
#: The system fields a user may filter on (every reader of the object may read them).
SYSTEM_FIELDS = {
    "createddate": FieldDef(api_name="CreatedDate", label="Created Date", type="datetime"),
    "lastmodifieddate": FieldDef(
        api_name="LastModifiedDate", label="Last Modified Date", type="datetime"
    ),
}
_ID = re.compile(r"^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_NUMBER = re.compile(r"^[+-]?(\d{1,18}(\.\d{0,8})?|\.\d{1,8})$")


class UserFilter(BaseModel):
    """One condition a user added on the list screen; all of them must match."""

    model_config = ConfigDict(extra="forbid")

    field: str = Field(min_length=1, max_length=80)
    operator: str = Field(min_length=1, max_length=20)
    values: list[Annotated[str, Field(max_length=MAX_VALUE_LENGTH)]] = Field(
        min_length=1, max_length=MAX_VALUES
    )


def _invalid(field: str, why: str) -> BadRequest:
    return BadRequest(f"filter on {field!r}: {why}", code="INVALID_FILTER")


Value = str | int | float | bool | date | datetime


def _number(f: FieldDef, raw: str) -> Value:
    if not _NUMBER.match(raw):
        raise ValueError("a number")
    number = Decimal(raw)
    return int(number) if number == number.to_integral_value() else float(number)


def _date(f: FieldDef, raw: str) -> Value:
    try:
        if _DATE.match(raw):
            return date.fromisoformat(raw)
    except ValueError:
        pass
    raise ValueError("a date (YYYY-MM-DD)")


def _datetime(f: FieldDef, raw: str) -> Value:
    text = raw + "T00:00:00Z" if _DATE.match(raw) else raw
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("a date and time (ISO 8601)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _checkbox(f: FieldDef, raw: str) -> Value:
    if raw not in ("true", "false"):
        raise ValueError("true or false")
    return raw == "true"


def _reference(f: FieldDef, raw: str) -> Value:
    if not _ID.match(raw):
        raise ValueError("a record id")
    return raw


def _picklist(f: FieldDef, raw: str) -> Value:
    if raw not in {v.value for v in f.values or ()}:
        raise ValueError("one of the field's picklist values")
    return raw


def _text(f: FieldDef, raw: str) -> Value:
    if not raw:
        raise ValueError("some text")
    return raw


#: Field type -> its value parser (ValueError says what was expected).
_PARSERS: dict[str, Callable[[FieldDef, str], Value]] = {
    "number": _number,
    "currency": _number,
    "percent": _number,
    "date": _date,
    "datetime": _datetime,
    "checkbox": _checkbox,
    "lookup": _reference,
    "master_detail": _reference,
    "picklist": _picklist,
}


def to_list_filter(
    view: MetadataView, obj: ObjectDef, access: CallerAccess, asked: UserFilter
) -> ListViewFilter:
    """The user's filter as a list view filter; 400 naming the field when it is not one the
    caller may filter on (unknown and unreadable fields are refused alike)."""
    f = view.field(obj, asked.field)
    readable = f is not None and access.field(view, obj, f)[0]
    if f is None:  # the caller reads the object (checked before), so its system fields
        f = SYSTEM_FIELDS.get(asked.field.lower())
        readable = f is not None
    if f is None or not readable or f.type not in OPERATORS:
        raise _invalid(asked.field, f"no filterable field with that name on {obj.api_name}")
    allowed = OPERATORS[f.type]
    if asked.operator not in allowed:
        raise _invalid(
            f.api_name, f"{asked.operator!r} is not one of {', '.join(allowed)} for a {f.type}"
        )
    if asked.operator != "in" and len(asked.values) != 1:
        raise _invalid(f.api_name, f"{asked.operator!r} takes one value")
    try:
        values = [_PARSERS.get(f.type, _text)(f, v) for v in asked.values]
    except ValueError as exc:
        raise _invalid(f.api_name, f"each value must be {exc}") from None
    if asked.operator == "in":
        return ListViewFilter(field=f.api_name, operator="in", value=tuple(map(str, values)))
    return ListViewFilter(field=f.api_name, operator=asked.operator, value=values[0])
