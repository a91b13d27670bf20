"""Field-type coercion: what a caller sends becomes what is stored, or a field-named error."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest

from nexus.contracts.records import ErrorCategory
from nexus.runtime.metadata.definitions import FieldDef
from nexus.runtime.records.coercion import InvalidValue, coerce, to_wire


def field(**kw: Any) -> FieldDef:
    return FieldDef(api_name=kw.pop("api_name", "F__c"), label="F", **kw)


@pytest.mark.parametrize(
    ("definition", "value", "stored"),
    [
        ({"type": "text", "length": 5}, "abc", "abc"),
        ({"type": "email"}, "a@b.co", "a@b.co"),
        ({"type": "currency"}, "12.345", Decimal("12.35")),
        ({"type": "number", "precision": 5, "scale": 0}, 12345, Decimal("12345")),
        ({"type": "percent", "precision": 5, "scale": 2}, 12.5, Decimal("12.50")),
        ({"type": "checkbox"}, True, True),
        ({"type": "date"}, "2026-11-29", date(2026, 11, 29)),
        ({"type": "datetime"}, "2026-11-29T10:00:00.000+0100", datetime(2026, 11, 29, 9, 0)),
        ({"type": "datetime"}, "2026-11-29T10:00:00Z", datetime(2026, 11, 29, 10, 0)),
        ({"type": "picklist", "restricted": True, "values": [{"value": "A"}]}, "A", "A"),
        ({"type": "multi_picklist", "values": [{"value": "A"}, {"value": "B"}]}, "B;A;B", "B;A"),
        (
            {"type": "lookup", "reference_to": "Account", "relationship_name": "Account"},
            "001A0000006Vm9r",
            "001A0000006Vm9rIAC",
        ),
        ({"type": "text", "length": 5}, None, None),
    ],
)
def test_valid_values_are_stored_normalized(definition: dict, value: Any, stored: Any) -> None:
    assert coerce(field(**definition), value) == stored


@pytest.mark.parametrize(
    ("definition", "value", "message"),
    [
        ({"type": "text", "length": 5}, "abcdef", "max length 5"),
        ({"type": "text", "length": 5}, 5, "expected a string"),
        ({"type": "email"}, "not-an-email", "invalid email"),
        ({"type": "number", "precision": 4, "scale": 2}, 123.4, "outside the valid range"),
        ({"type": "currency"}, "twelve", "not a number"),
        ({"type": "currency"}, "NaN", "finite"),
        ({"type": "checkbox"}, "true", "true or false"),
        ({"type": "date"}, "29/11/2026", "invalid date"),
        ({"type": "datetime"}, "2026-11-29T10:00:00", "time zone"),
        (
            {"type": "picklist", "restricted": True, "values": [{"value": "A"}]},
            "Z",
            "restricted picklist",
        ),
        (
            {"type": "multi_picklist", "restricted": True, "values": [{"value": "A"}]},
            "A;Q",
            "restricted picklist: Q",
        ),
    ],
)
def test_invalid_values_name_the_field(definition: dict, value: Any, message: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        coerce(field(api_name="Amount__c", **definition), value)
    assert caught.value.error.category is ErrorCategory.INVALID_TYPE_VALUE
    assert caught.value.error.fields == ["Amount__c"]
    assert message in caught.value.error.message


def test_a_malformed_reference_is_an_invalid_field() -> None:
    lookup = field(type="lookup", reference_to="Account", relationship_name="Account")
    with pytest.raises(InvalidValue) as caught:
        coerce(lookup, "not-an-id")
    assert caught.value.error.category is ErrorCategory.INVALID_FIELD


def test_wire_forms() -> None:
    assert to_wire(field(type="currency"), Decimal("12.50")) == 12.5
    assert to_wire(field(type="number", precision=5, scale=0), Decimal("7")) == 7
    assert to_wire(field(type="date"), date(2026, 1, 2)) == "2026-01-02"
    assert to_wire(field(type="datetime"), datetime(2026, 1, 2, 3, 4, 5, 678000)) == (
        "2026-01-02T03:04:05.678+0000"
    )
