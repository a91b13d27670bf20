"""`/composite` subrequests that are record operations, as ONE Runtime `records/composite` call.

Record create, read, update, delete and upsert subrequests are translated into Runtime items
(references left for Runtime to resolve); Runtime runs them in order in one transaction, so
with `allOrNone` a failure undoes what earlier subrequests did (ADR 0036). Each outcome is
shaped as the single-record endpoint would have answered it. A subrequest of any other kind
(a query, a describe, ...) makes `translate` answer None, and the caller runs the request
subrequest by subrequest instead.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import check_version, version_number
from nexus.apps.sfcrm.errors import SfError, bad_request, from_record_errors, from_runtime
from nexus.apps.sfcrm.sobjects import record_fields, split_fields
from nexus.contracts.composite import CompositeError, CompositeOutcome, CompositeResponse
from nexus.contracts.records import ItemResult

SOBJECTS = "/sobjects/"
PREFIX = "/services/data/"
HALTED_MESSAGE = (
    "The transaction was rolled back since another operation in the same transaction failed."
)
MAX_URL = 64 * 1024
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Translated:
    """One subrequest as a Runtime item, and what shaping its answer needs."""

    def __init__(self, item: dict[str, Any], version: str, object_name: str) -> None:
        self.item = item
        self.version = version
        self.object_name = object_name


def translate(subrequests: list[dict[str, Any]]) -> list[Translated] | None:
    """Every subrequest as a Runtime item, or None when one is not a record operation."""
    out: list[Translated] = []
    for sub in subrequests:
        one = _translate(sub)
        if one is None:
            return None
        out.append(one)
    return out


def url_error(url: str) -> SfError | None:
    """Why a subrequest url cannot be run, or None. A url becomes a request to this
    AppService: it is a path under /services/data/ (not `//host/...`) with no `.` or `..`
    segment, percent-encoded or not, which would normalise to a path outside it (the role's
    own /readyz and /version), and no control character (a header injection)."""
    if len(url) > MAX_URL:
        return bad_request("INVALID_INPUT", f"a subrequest url has at most {MAX_URL} characters")
    if CONTROL.search(url):
        return bad_request("INVALID_INPUT", "a subrequest url holds a control character")
    segments = unquote(urlsplit(url).path).split("/")
    if not url.startswith(PREFIX) or "." in segments or ".." in segments:
        return bad_request(
            "INVALID_INPUT", f"a subrequest url is a path under {PREFIX} with no . or .. segment"
        )
    return None


def _translate(sub: dict[str, Any]) -> Translated | None:
    """None also for a url `url_error` refuses: it is answered subrequest by subrequest."""
    if url_error(str(sub["url"])) is not None:
        return None
    parts = urlsplit(str(sub["url"]))
    version, _, rest = parts.path[len(PREFIX) :].partition("/")
    try:
        check_version(version)
    except SfError:
        return None
    if not ("/" + rest).startswith(SOBJECTS):
        return None
    segments = [unquote(s) for s in rest[len(SOBJECTS) - 1 :].split("/")]
    if not segments[0]:
        return None
    asked = parse_qs(parts.query).get("fields")
    fields = split_fields(asked[-1] if asked else None)
    method = str(sub.get("method", "GET")).upper()
    item = _item(method, segments[1:], sub.get("body"), fields)
    if item is None:
        return None
    ref = str(sub.get("referenceId") or "") or None
    item = {k: v for k, v in item.items() if v is not None} | {"object": segments[0], "ref": ref}
    return Translated(item, version, segments[0])


#: (method, 0 = the object, 1 = a record id, 2 = an external id field and value) -> op
OPERATIONS = {
    ("POST", 0): "create",
    ("GET", 1): "read",
    ("PATCH", 1): "update",
    ("DELETE", 1): "delete",
    ("GET", 2): "read",
    ("PATCH", 2): "upsert",
}


def _item(
    method: str, args: list[str], body: Any, fields: list[str] | None
) -> dict[str, Any] | None:
    """The Runtime item for `METHOD sobjects/{T}/{args...}`, or None (not a record operation)."""
    if len(args) == 2 and args[0].lower() == "id" and method == "GET":
        args = args[1:]
    if any(not a for a in args) or args[:1] == ["describe"]:
        return None
    if len(args) > 1 and args[0].lower() == "id":  # upsert by Id: the endpoint refuses it
        return None
    target: dict[str, Any] = {}
    if len(args) == 1:
        target = {"id": args[0]}
    elif args:
        target = {"external_id_field": args[0], "external_id": "/".join(args[1:])}
    op = OPERATIONS.get((method, min(len(args), 2)))
    if op is None:
        return None
    item = {"op": op, **target}
    if op == "read":
        item["select"] = fields
    elif op != "delete":
        if not isinstance(body, dict):
            return None
        skip = str(target.get("external_id_field", "")).lower()
        item["fields"] = {k: v for k, v in record_fields(body).items() if k.lower() != skip}
    return item


def responses(
    translated: list[Translated], subrequests: list[dict[str, Any]], answer: CompositeResponse
) -> list[dict[str, Any]]:
    """Runtime's outcomes as `compositeResponse` entries, in order."""
    return [
        _response(t, str(sub.get("referenceId") or ""), outcome)
        for t, sub, outcome in zip(translated, subrequests, answer.outcomes, strict=True)
    ]


def _response(t: Translated, ref: str, outcome: CompositeOutcome) -> dict[str, Any]:
    if outcome.state in ("rolled_back", "halted"):
        return halted(ref)
    if outcome.error is not None:
        return _runtime_error(t, ref, outcome.error)
    if outcome.record is not None:
        record = outcome.record
        return entry(ref, 200, wire.record(t.version, record.object, record.fields))
    result = outcome.result
    if result is None:  # pragma: no cover - Runtime answers every item
        return error_entry(ref, SfError(500, "UNKNOWN_EXCEPTION", "no outcome"))
    if not result.success:
        return error_entry(ref, from_record_errors(result.errors))
    return _saved(t, ref, result)


def _runtime_error(t: Translated, ref: str, error: CompositeError) -> dict[str, Any]:
    """A failed item as its single-record endpoint answers (300 for several external ids)."""
    if error.code == "INVALID_REFERENCE":
        return invalid_reference(ref, (error.fields or {}).get("reference", ""))
    if error.status == 409 and error.code == "MULTIPLE_RECORDS":
        base = f"{wire.base(t.version)}/sobjects/{t.object_name}"
        return entry(ref, 300, [f"{base}/{i}" for i in error.fields or {}])
    envelope = {"code": error.code, "message": error.message, "fields": error.fields}
    return error_entry(ref, from_runtime(error.status, envelope))


def _saved(t: Translated, ref: str, result: ItemResult) -> dict[str, Any]:
    op = t.item["op"]
    if op == "create":
        location = f"{wire.base(t.version)}/sobjects/{t.object_name}/{result.id}"
        return entry(ref, 201, wire.save_result(result), {"Location": location})
    if op != "upsert":
        return entry(ref, 204, None)
    if result.created:
        return entry(ref, 201, wire.save_result(result, upsert=True))
    if version_number(t.version) < 46.0:
        return entry(ref, 204, None)
    return entry(ref, 200, wire.save_result(result, upsert=True))


def entry(
    ref: str, status: int, body: Any, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "body": body,
        "httpHeaders": headers or {},
        "httpStatusCode": status,
        "referenceId": ref,
    }


def error_entry(ref: str, error: SfError) -> dict[str, Any]:
    return entry(ref, error.status, error.body())


def halted(ref: str) -> dict[str, Any]:
    return entry(ref, 400, [{"errorCode": "PROCESSING_HALTED", "message": HALTED_MESSAGE}])


def invalid_reference(ref: str, missing: str) -> dict[str, Any]:
    message = f"Invalid reference specified. No value for {missing} found."
    return entry(ref, 400, [{"errorCode": "PROCESSING_HALTED", "message": message}])
