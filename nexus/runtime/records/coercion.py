"""Turn caller-supplied values into stored values, per field type; errors name the field.

Pure functions: no database, no metadata lookups beyond the field definition itself.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from nexus.contracts.records import ErrorCategory, ErrorReason, RecordError
from nexus.platform.ids import to_18
from nexus.runtime.metadata.definitions import FieldDef

EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
MAX_LENGTH = {
    "textarea": 255,
    "long_text": 131_072,
    "email": 80,
    "phone": 40,
    "url": 255,
    "picklist": 255,
    "multi_picklist": 4099,
}
_DATETIME_SF = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?)([+-]\d{2})(\d{2})$")


class InvalidValue(Exception):
    def __init__(self, error: RecordError) -> None:
        super().__init__(error.message)
        self.error = error


def _bad(field: FieldDef, message: str, reason: ErrorReason | None = None) -> InvalidValue:
    return InvalidValue(
        RecordError(
            category=ErrorCategory.INVALID_TYPE_VALUE,
            message=f"{field.api_name}: {message}",
            fields=[field.api_name],
            reason=reason,
        )
    )


def coerce(field: FieldDef, value: Any) -> Any:
    """The value to store for `field`; None stays None (required-ness is checked per record)."""
    if value is None:
        return None
    return _COERCERS.get(field.type, _text)(field, value)


def _checkbox(field: FieldDef, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _bad(field, "expected true or false")
    return value


def _text(field: FieldDef, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(field, "expected a string")
    limit = field.length if field.type == "text" else MAX_LENGTH.get(field.type, 255)
    if limit is not None and len(value) > limit:
        raise _bad(field, f"data value too large (max length {limit})")
    if field.type == "email" and value and not EMAIL.fullmatch(value):
        raise _bad(field, "invalid email address")
    if field.type == "picklist" and field.restricted and value:
        allowed = {v.value for v in field.values or () if v.active}
        if value not in allowed:
            raise _bad(
                field,
                f"bad value for restricted picklist: {value}",
                ErrorReason.RESTRICTED_PICKLIST,
            )
    return value


def _multi_picklist(field: FieldDef, value: Any) -> str:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(";") if v.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value if v.strip()]
    else:
        raise _bad(field, "expected values separated by ';'")
    unique = list(dict.fromkeys(items))
    if field.restricted:
        allowed = {v.value for v in field.values or () if v.active}
        bad = [v for v in unique if v not in allowed]
        if bad:
            raise _bad(
                field,
                f"bad value for restricted picklist: {bad[0]}",
                ErrorReason.RESTRICTED_PICKLIST,
            )
    return _text(field, ";".join(unique))


def _number(field: FieldDef, value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise _bad(field, "expected a number")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise _bad(field, f"not a number: {str(value)[:40]}") from None
    if not number.is_finite():
        raise _bad(field, "not a finite number")
    precision, scale = field.effective_precision
    digits = precision - scale
    if number and number.adjusted() >= digits:  # quantize raises past 28 digits: check first
        raise _out_of_range(field, digits)
    rounded = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    integer_digits = len(str(abs(rounded).to_integral_value(rounding="ROUND_DOWN")).lstrip("0"))
    if integer_digits > digits:  # rounding can add one (99.995 -> 100.00)
        raise _out_of_range(field, digits)
    return rounded


def _out_of_range(field: FieldDef, digits: int) -> InvalidValue:
    return _bad(
        field,
        f"number outside the valid range ({digits} integer digits)",
        ErrorReason.NUMBER_OUT_OF_RANGE,
    )


def _date(field: FieldDef, value: Any) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise _bad(field, "expected a date (YYYY-MM-DD)")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise _bad(field, f"invalid date: {value[:40]} (expected YYYY-MM-DD)") from None


def _datetime(field: FieldDef, value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        text = value.strip().replace("Z", "+00:00")
        match = _DATETIME_SF.match(text)  # Salesforce's "+0000" offset form
        if match:
            text = f"{match.group(1)}{match.group(2)}:{match.group(3)}"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise _bad(field, f"invalid date/time: {value[:40]} (ISO 8601)") from None
    else:
        raise _bad(field, "expected an ISO 8601 date/time")
    if parsed.tzinfo is None:
        raise _bad(field, "a date/time needs a time zone (for example Z)")
    return parsed.astimezone(UTC).replace(
        tzinfo=None, microsecond=parsed.microsecond // 1000 * 1000
    )


def _reference(field: FieldDef, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(field, "expected a record id")
    try:
        return to_18(value)
    except ValueError:
        raise InvalidValue(
            RecordError(
                category=ErrorCategory.INVALID_FIELD,
                message=f"{field.api_name}: invalid id {value[:20]}",
                fields=[field.api_name],
                reason=ErrorReason.MALFORMED_ID,
            )
        ) from None


_COERCERS: dict[str, Any] = {
    "number": _number,
    "currency": _number,
    "percent": _number,
    "checkbox": _checkbox,
    "date": _date,
    "datetime": _datetime,
    "lookup": _reference,
    "master_detail": _reference,
    "multi_picklist": _multi_picklist,
}


#: field types whose stored value is already the wire value
WIRE_AS_STORED = frozenset(
    {"text", "textarea", "long_text", "email", "phone", "url", "picklist", "multi_picklist"}
    | {"lookup", "master_detail", "auto_number", "id"}
)


def to_wire(field: FieldDef, value: Any) -> Any:
    """A stored value as the neutral wire form (numbers stay exact as strings are not used)."""
    if value is None:
        return None
    if field.type in ("number", "currency", "percent"):
        number = Decimal(value)
        return (
            int(number)
            if number == number.to_integral_value() and field.effective_precision[1] == 0
            else float(number)
        )
    if field.type == "checkbox":
        return bool(value)
    if field.type == "date":
        return value.isoformat() if isinstance(value, date) else str(value)
    if field.type == "datetime":
        return wire_datetime(value)
    return value


def wire_datetime(value: Any) -> str | None:
    """A stored UTC date/time in the wire form `2026-11-29T10:30:00.000+0000`."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+0000"


def formula_wire(value: Any) -> Any:
    """A computed formula value in the wire form of its return type."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return wire_datetime(value)
    if isinstance(value, date):
        return value.isoformat()
    return value
