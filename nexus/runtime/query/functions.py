"""Select-list functions that change what a column shows, not which rows match: `FIELDS()`
(which fields a record carries), `toLabel()` (a picklist value's label) and `FORMAT()`.

FORMAT is locale-neutral, the same for every caller: numbers, currency and percent with a
comma between thousands, a point before the field's decimal places (its scale; currency 2
by default) and no currency symbol (an org has no currency setting), percent with a `%`
after; dates as ISO `2026-12-07`; date/times in UTC as `2026-12-07 14:03:05 UTC`. Any other
type shows its value unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import SYSTEM_FIELDS, FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.query.parser import Call, Path, SoqlError
from nexus.runtime.system_objects.definitions import as_system

NUMBERS = frozenset({"number", "currency", "percent"})
PICKLISTS = frozenset({"picklist", "multi_picklist"})
Display = Callable[[Any], Any]


def expand_fields(
    view: MetadataView, access: CallerAccess, obj: ObjectDef, call: Call
) -> list[Path]:
    """FIELDS(ALL | STANDARD | CUSTOM) as the field paths the caller may read, in describe
    order: Id, Name, the object's fields, then the other system fields. Custom fields are
    those whose name ends in `__c`; Id, Name and the system fields are standard. A system
    object (User, ...) has standard fields only, every one readable: its describe's."""
    kind = call.args[0].text.upper()
    here = {"line": call.line, "column": call.column}
    projected = as_system(obj)
    if projected is not None:
        standard = [] if kind == "CUSTOM" else [f.api_name for f in projected.fields]
        return [Path((name,), **here) for name in standard]
    readable = [
        f.api_name
        for f in obj.all_fields()
        if access.field(view, obj, f)[0] and f.api_name != "Name"
    ]
    system = [name for name in SYSTEM_FIELDS if name != "Id"]
    if kind == "CUSTOM":
        names = [name for name in readable if name.endswith("__c")]
    elif kind == "STANDARD":
        names = ["Id", "Name", *(n for n in readable if not n.endswith("__c")), *system]
    else:
        names = ["Id", "Name", *readable, *system]
    return [Path((name,), **here) for name in names]


def to_label(definition: FieldDef | None, path: Path) -> Display:
    """A picklist value -> its label (the value where no label is set); a multi-select
    picklist's values each, joined by `;` as stored."""
    if definition is None or definition.type not in PICKLISTS:
        kind = "a system field" if definition is None else f"of type {definition.type}"
        raise SoqlError(
            f"toLabel() applies to picklist fields; '{path.text}' is {kind} "
            f"(line {path.line}, column {path.column})",
            code="INVALID_FIELD",
        )
    labels = {v.value: v.label or v.value for v in definition.values or ()}
    if definition.type == "picklist":
        return lambda value: labels.get(value, value)
    return lambda value: ";".join(labels.get(v, v) for v in str(value).split(";"))


def format_display(kind: str, scale: int) -> Display | None:
    """FORMAT() of a value of this type (`kind`, a field type or system kind) with `scale`
    decimal places; None where the value shows unchanged."""
    if kind in NUMBERS:
        suffix = "%" if kind == "percent" else ""
        return lambda value: f"{_decimal(value):,.{scale}f}{suffix}"
    if kind == "date":
        return _date
    if kind == "datetime":
        return _datetime
    return None


def field_scale(definition: FieldDef | None) -> int:
    if definition is None or definition.type not in NUMBERS:
        return 0
    return definition.effective_precision[1]


def _decimal(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _date(value: Any) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)[:10]


def _datetime(value: Any) -> str:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
