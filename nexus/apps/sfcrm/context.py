"""What every dialect request goes through: version check, caller, API usage, reply shape."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from nexus.apps.sfcrm.errors import SfError, bad_request, not_found
from nexus.apps.sfcrm.runtime_client import Caller, RuntimeClient
from nexus.contracts.usage import USAGE_PATH, UsageRecordResponse
from nexus.platform.observability import get_logger

log = get_logger(__name__)

VERSION = re.compile(r"^v([1-9]\d{1,2})\.0$")
#: The oldest version Salesforce still serves (21.0 to 30.0 were retired in Summer '25).
MIN_VERSION = 31
#: Summer '26 (the newest generally available release the REST developer guide lists).
LATEST_VERSION = 67
LIMIT_HEADER = "Sforce-Limit-Info"
#: Subrequests of `/composite` carry this header with the process's own secret: they were
#: counted once, as the composite request.
SUBREQUEST_HEADER = "x-nexus-sfcrm-subrequest"
JSON_BODY_LIMIT = 8 * 1024 * 1024


class FastJSONResponse(JSONResponse):
    """JSON encoded with orjson: a 200-record query page is several times cheaper than with
    the standard library (ADR 0035)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class ApiUsage:
    """API requests per user per UTC day, and the daily limit (REQUEST_LIMIT_EXCEEDED).

    Counted here and reported to Runtime about every second in one call for all users
    (`report`); Runtime keeps the day's totals (database clock) and answers them, so the
    limit holds across restarts and AppService processes, give or take the requests other
    processes have not reported yet (see ADR 0030).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.day = ""
        self._known: dict[tuple[str, str], int] = {}  # Runtime's totals for `day`
        self._pending: dict[tuple[str, str], int] = {}  # counted here, not reported yet
        self._reporting: dict[tuple[str, str], int] = {}  # in a report Runtime has not answered

    def used(self, caller: Caller) -> int:
        key = (caller.org_id, caller.user_id)
        return self._known.get(key, 0) + self._reporting.get(key, 0) + self._pending.get(key, 0)

    def count(self, caller: Caller) -> int:
        used = self.used(caller) + 1
        if used > self.limit:
            raise SfError(403, "REQUEST_LIMIT_EXCEEDED", "TotalRequests Limit exceeded.")
        key = (caller.org_id, caller.user_id)
        self._pending[key] = self._pending.get(key, 0) + 1
        return used

    def take(self) -> dict[tuple[str, str], int]:
        """The counts to report; they are no longer pending, but still count as used until
        Runtime's answer includes them (else a user's usage would dip during a report)."""
        taken, self._pending = self._pending, {}
        self._reporting = taken
        return taken

    def settle(self, day: str, totals: dict[tuple[str, str], int]) -> None:
        """Runtime's totals after a report (they include the reported counts)."""
        if day != self.day:
            self.day, self._known = day, {}
        self._known.update(totals)
        self._reporting = {}

    def restore(self, taken: dict[tuple[str, str], int]) -> None:
        """A report that failed: its counts are pending again."""
        self._reporting = {}
        for key, n in taken.items():
            self._pending[key] = self._pending.get(key, 0) + n

    async def report(self, runtime: RuntimeClient) -> None:
        taken = self.take()
        if not taken:
            return
        counts = [{"org_id": o, "user_id": u, "requests": n} for (o, u), n in taken.items()]
        try:
            answer = UsageRecordResponse.model_validate(
                await runtime.workload_call(USAGE_PATH, {"counts": counts})
            )
        except (SfError, ValueError) as exc:
            self.restore(taken)
            log.warning("sfcrm.usage_report_failed", error=type(exc).__name__)
            return
        self.settle(answer.day, {(t.org_id, t.user_id): t.requests for t in answer.totals})


@dataclass
class Dialect:
    runtime: RuntimeClient
    usage: ApiUsage
    subrequest_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    async def enter(self, request: Request, version: str | None = None) -> Caller:
        """The caller of a dialect request (401 without a valid token), counted once."""
        if version is not None:
            check_version(version)
        caller = await self.runtime.caller(request.headers.get("authorization"))
        if request.headers.get(SUBREQUEST_HEADER) == self.subrequest_secret:
            used = self.usage.used(caller)
        else:
            used = self.usage.count(caller)
        request.state.api_usage = used
        return caller

    def limit_info(self, request: Request) -> dict[str, str]:
        used = getattr(request.state, "api_usage", None)
        if used is None:
            return {}
        return {LIMIT_HEADER: f"api-usage={used}/{self.usage.limit}"}

    def reply(self, request: Request, body: Any, status: int = 200) -> Response:
        if body is None and status == 204:
            return Response(status_code=204, headers=self.limit_info(request))
        return FastJSONResponse(body, status_code=status, headers=self.limit_info(request))


def dialect(request: Request) -> Dialect:
    state: Dialect = request.app.state.dialect
    return state


def check_version(version: str) -> str:
    """`v31.0` to the latest: a version Salesforce never shipped (v60.5, v99.0) or retired
    (v19.0) is a resource that does not exist."""
    match = VERSION.fullmatch(version)
    if match is None or not MIN_VERSION <= int(match.group(1)) <= LATEST_VERSION:
        raise not_found()
    return version


def version_number(version: str) -> float:
    return float(version[1:])


async def json_body(request: Request, limit: int = JSON_BODY_LIMIT) -> Any:
    """The request's JSON body (at most `limit` bytes, else 413); 400 JSON_PARSER_ERROR when it
    is not JSON."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise SfError(413, "REQUEST_ENTITY_TOO_LARGE", "the request body is too large")
    try:
        return orjson.loads(raw) if raw.strip() else None
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        raise bad_request("JSON_PARSER_ERROR", "The request body is not valid JSON") from None


async def json_object(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("JSON_PARSER_ERROR", "The request body must be a JSON object")
    return body
