"""The dialect's error codes for Runtime's neutral record errors: a reason (finer than the
category) becomes Salesforce's own code, in a SaveResult and in a single-record error
response; the version check; what Runtime's coercion reports for each reason."""

from __future__ import annotations

from typing import Any

import pytest

from nexus.apps.sfcrm.context import LATEST_VERSION, MIN_VERSION, check_version
from nexus.apps.sfcrm.errors import SfError, error_item, from_record_errors
from nexus.contracts.records import ErrorCategory, ErrorReason, RecordError
from nexus.runtime.metadata.definitions import FieldDef
from nexus.runtime.records.coercion import InvalidValue, coerce


def error(category: ErrorCategory, reason: ErrorReason | None = None) -> RecordError:
    return RecordError(category=category, message="m", fields=["F__c"], reason=reason)


@pytest.mark.parametrize(
    ("category", "reason", "code", "status"),
    [
        (
            ErrorCategory.INVALID_TYPE_VALUE,
            ErrorReason.NUMBER_OUT_OF_RANGE,
            "NUMBER_OUTSIDE_VALID_RANGE",
            400,
        ),
        (
            ErrorCategory.INVALID_TYPE_VALUE,
            ErrorReason.RESTRICTED_PICKLIST,
            "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST",
            400,
        ),
        (ErrorCategory.INVALID_FIELD, ErrorReason.MALFORMED_ID, "MALFORMED_ID", 400),
        (ErrorCategory.NOT_FOUND, ErrorReason.MALFORMED_ID, "MALFORMED_ID", 400),
        (
            ErrorCategory.INVALID_FIELD,
            ErrorReason.READ_ONLY_FIELD,
            "INVALID_FIELD_FOR_INSERT_UPDATE",
            400,
        ),
        # without a reason the category decides, as before
        (ErrorCategory.INVALID_TYPE_VALUE, None, "INVALID_TYPE_ON_FIELD_IN_RECORD", 400),
        (ErrorCategory.INVALID_FIELD, None, "INVALID_FIELD", 400),
        (ErrorCategory.NOT_FOUND, None, "NOT_FOUND", 404),
    ],
)
def test_a_reason_names_the_salesforce_code(
    category: ErrorCategory, reason: ErrorReason | None, code: str, status: int
) -> None:
    item = error_item(error(category, reason))
    assert item == {"statusCode": code, "message": "m", "fields": ["F__c"]}
    response = from_record_errors([error(category, reason)])
    assert (response.status, response.code, response.fields) == (status, code, ["F__c"])
    assert response.body() == [{"message": "m", "errorCode": code, "fields": ["F__c"]}]


def test_every_reason_has_a_code() -> None:
    codes = {error_item(error(ErrorCategory.INVALID_FIELD, r))["statusCode"] for r in ErrorReason}
    assert len(codes) == len(ErrorReason)
    assert "INVALID_FIELD" not in codes  # each one more precise than the category's


def field(**kw: Any) -> FieldDef:
    return FieldDef.model_validate({"api_name": "F__c", "label": "F", **kw})


@pytest.mark.parametrize(
    ("definition", "value", "reason"),
    [
        ({"type": "number", "precision": 4, "scale": 2}, 123.4, ErrorReason.NUMBER_OUT_OF_RANGE),
        ({"type": "currency"}, "1E+999999", ErrorReason.NUMBER_OUT_OF_RANGE),
        (
            {"type": "picklist", "restricted": True, "values": [{"value": "A"}]},
            "Z",
            ErrorReason.RESTRICTED_PICKLIST,
        ),
        (
            {"type": "multi_picklist", "restricted": True, "values": [{"value": "A"}]},
            "A;Q",
            ErrorReason.RESTRICTED_PICKLIST,
        ),
        (
            {"type": "lookup", "reference_to": "Account", "relationship_name": "Account"},
            "not-an-id",
            ErrorReason.MALFORMED_ID,
        ),
        ({"type": "currency"}, "twelve", None),  # not a number at all: the category alone
    ],
)
def test_coercion_reports_the_reason(
    definition: dict[str, Any], value: Any, reason: ErrorReason | None
) -> None:
    with pytest.raises(InvalidValue) as caught:
        coerce(field(**definition), value)
    assert caught.value.error.reason is reason
    assert caught.value.error.fields == ["F__c"]


def test_an_unrestricted_picklist_takes_any_value() -> None:
    assert coerce(field(type="picklist", values=[{"value": "A"}]), "Z") == "Z"


@pytest.mark.parametrize("version", [f"v{MIN_VERSION}.0", "v59.0", f"v{LATEST_VERSION}.0"])
def test_versions_salesforce_serves(version: str) -> None:
    assert check_version(version) == version


@pytest.mark.parametrize(
    "version",
    ["v99.0", "v19.0", "v30.0", f"v{LATEST_VERSION + 1}.0", "v60.5", "v60", "60.0", "v060.0"],
)
def test_other_versions_are_not_found(version: str) -> None:
    with pytest.raises(SfError) as caught:
        check_version(version)
    assert (caught.value.status, caught.value.code) == (404, "NOT_FOUND")
