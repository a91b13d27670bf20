"""The dialect's error envelope: HTTP status plus `[{"message", "errorCode", "fields"}]`.

Runtime answers with the neutral Nexus envelope (`{code, message, fields}`) and neutral
record error categories; this module maps both onto the Salesforce error codes clients
branch on (simple-salesforce picks its exception class by status; jsforce reads errorCode).
"""

from __future__ import annotations

from typing import Any

from nexus.contracts.records import ErrorCategory, ErrorReason, RecordError

#: Neutral record error category -> Salesforce errorCode.
CATEGORY_CODES: dict[ErrorCategory, str] = {
    ErrorCategory.NOT_FOUND: "NOT_FOUND",
    ErrorCategory.INSUFFICIENT_ACCESS: "INSUFFICIENT_ACCESS_OR_READONLY",
    ErrorCategory.INVALID_FIELD: "INVALID_FIELD",
    ErrorCategory.REQUIRED_FIELD_MISSING: "REQUIRED_FIELD_MISSING",
    ErrorCategory.INVALID_TYPE_VALUE: "INVALID_TYPE_ON_FIELD_IN_RECORD",
    ErrorCategory.DUPLICATE_VALUE: "DUPLICATE_VALUE",
    ErrorCategory.ENTITY_IS_DELETED: "ENTITY_IS_DELETED",
    ErrorCategory.CONFLICT: "UNABLE_TO_LOCK_ROW",
    ErrorCategory.LIMIT_EXCEEDED: "LIMIT_EXCEEDED",
    ErrorCategory.VALIDATION_RULE: "FIELD_CUSTOM_VALIDATION_EXCEPTION",
}

#: Neutral error reason (finer than the category) -> Salesforce errorCode.
REASON_CODES: dict[ErrorReason, str] = {
    ErrorReason.NUMBER_OUT_OF_RANGE: "NUMBER_OUTSIDE_VALID_RANGE",
    ErrorReason.MALFORMED_ID: "MALFORMED_ID",
    ErrorReason.READ_ONLY_FIELD: "INVALID_FIELD_FOR_INSERT_UPDATE",
    ErrorReason.RESTRICTED_PICKLIST: "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST",
}

#: Runtime's error codes (neutral envelope) that differ from the Salesforce code.
RUNTIME_CODES: dict[str, str] = {
    "INSUFFICIENT_ACCESS": "INSUFFICIENT_ACCESS_OR_READONLY",
    "BAD_REQUEST": "INVALID_FIELD",
    "INVALID_TYPE_VALUE": "INVALID_TYPE_ON_FIELD_IN_RECORD",
    "VALIDATION_RULE": "FIELD_CUSTOM_VALIDATION_EXCEPTION",
}

#: The HTTP status of a single-record request that failed with this category.
CATEGORY_STATUS: dict[ErrorCategory, int] = {
    ErrorCategory.NOT_FOUND: 404,
    ErrorCategory.INSUFFICIENT_ACCESS: 403,
    ErrorCategory.ENTITY_IS_DELETED: 404,
}
#: Reasons whose status differs from their category's (a malformed id is the caller's 400,
#: not a record that was not found).
REASON_STATUS: dict[ErrorReason, int] = {ErrorReason.MALFORMED_ID: 400}


class SfError(Exception):
    """One dialect error response."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: list[str] | None = None,
        *,
        more: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or []
        self.more = more or []

    def body(self) -> list[dict[str, Any]]:
        first = {"message": self.message, "errorCode": self.code, "fields": self.fields}
        return [first, *self.more]


def not_found(message: str = "The requested resource does not exist") -> SfError:
    return SfError(404, "NOT_FOUND", message)


def bad_request(code: str, message: str, fields: list[str] | None = None) -> SfError:
    return SfError(400, code, message, fields)


def error_item(error: RecordError) -> dict[str, Any]:
    """One entry of a SaveResult's `errors` list."""
    code = CATEGORY_CODES.get(error.category, error.category.value)
    if error.reason is not None:
        code = REASON_CODES.get(error.reason, code)
    if error.category is ErrorCategory.CONFLICT and "all-or-none" in error.message:
        code = "ALL_OR_NONE_OPERATION_ROLLED_BACK"
    return {"statusCode": code, "message": error.message, "fields": list(error.fields)}


def from_record_errors(errors: list[RecordError]) -> SfError:
    """A failed single-record mutation as an error response (status from the first error)."""
    first = errors[0]
    status = CATEGORY_STATUS.get(first.category, 400)
    if first.reason is not None:
        status = REASON_STATUS.get(first.reason, status)
    items = [
        {"message": i["message"], "errorCode": i["statusCode"], "fields": i["fields"]}
        for i in (error_item(e) for e in errors)
    ]
    first_item = items[0]
    return SfError(
        status, first_item["errorCode"], first.message, list(first.fields), more=items[1:]
    )


#: Runtime error statuses that keep their status and get one fixed dialect code.
STATUS_CODES: dict[int, tuple[int, str, str]] = {
    401: (401, "INVALID_SESSION_ID", "Session expired or invalid"),
    404: (404, "NOT_FOUND", "The requested resource does not exist"),
    413: (413, "REQUEST_ENTITY_TOO_LARGE", "the request is too large"),
    502: (503, "SERVER_UNAVAILABLE", "the service is temporarily unavailable"),
    503: (503, "SERVER_UNAVAILABLE", "the service is temporarily unavailable"),
    504: (503, "SERVER_UNAVAILABLE", "the service is temporarily unavailable"),
}


#: Runtime's 403s that are not about a record: (status, errorCode, message) in the dialect.
REFUSALS: dict[str, tuple[int, str, str]] = {
    "WORKLOAD_NOT_ALLOWED": (503, "SERVER_UNAVAILABLE", "the service is misconfigured"),
    "INVALID_WORKLOAD": (503, "SERVER_UNAVAILABLE", "the service is misconfigured"),
    # a token without the `api` scope: Salesforce's own answer
    "INSUFFICIENT_SCOPE": (
        401,
        "INVALID_SESSION_ID",
        "This session is not valid for use with the REST API",
    ),
}


def from_runtime(status: int, body: Any) -> SfError:
    """A Runtime error answer (neutral envelope) as a dialect error."""
    envelope = body if isinstance(body, dict) else {}
    code = str(envelope.get("code", ""))
    message = str(envelope.get("message", ""))
    fields = envelope.get("fields")
    field_names = list(fields) if isinstance(fields, dict) else []
    if status == 403:
        refusal = REFUSALS.get(code)
        if refusal is not None:
            return SfError(*refusal)
        return SfError(403, "INSUFFICIENT_ACCESS_OR_READONLY", message or "insufficient access")
    if status == 400:
        return SfError(400, RUNTIME_CODES.get(code, code or "INVALID_FIELD"), message, field_names)
    if status == 409:
        return SfError(409, code or "UNABLE_TO_LOCK_ROW", message, field_names)
    fixed = STATUS_CODES.get(status)
    if fixed is not None:
        shown = message if status == 404 and message else fixed[2]
        return SfError(fixed[0], fixed[1], shown)
    return SfError(500, "UNKNOWN_EXCEPTION", "an unexpected error occurred")
