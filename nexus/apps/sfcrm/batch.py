"""`POST composite/batch`: up to 25 independent subrequests, each run as its own request
through this AppService (the way `/composite` runs subrequests that are not record
operations: `composite.send_subrequest`), so each is authorized by its own Runtime call.
A failure does not undo the others; with `haltOnError` the ones after it are not run
(412 BATCH_PROCESSING_HALTED). The whole batch counts as one API request.

    {"batchRequests": [{"method": "GET", "url": "v62.0/sobjects/Account/001..."},
                       {"method": "PATCH", "url": "v62.0/sobjects/Account/001...",
                        "richInput": {"Name": "New"}}],
     "haltOnError": false}
    200 {"hasErrors": false, "results": [{"statusCode": 200, "result": {...}},
                                         {"statusCode": 204, "result": null}]}
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm.composite import (
    MAX_SUBREQUESTS,
    send_subrequest,
    subrequests_client,
    truthy,
)
from nexus.apps.sfcrm.context import dialect, json_object
from nexus.apps.sfcrm.errors import SfError, bad_request

router = APIRouter(prefix="/services/data/{version}/composite")
PREFIX = "/services/data/"
#: Salesforce's batch subrequest methods (a HEAD has no answer to put in `result`).
METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")
HALTED = [
    {"errorCode": "BATCH_PROCESSING_HALTED", "message": "Batch processing halted per request"}
]


def _url(raw: str) -> str:
    """A batch url (`v62.0/sobjects/...`, relative to /services/data/) as a path here;
    a composite resource is not a batch subrequest, percent-encoded or not (the path is
    routed decoded: `%63omposite/batch` is `composite/batch`)."""
    url = raw if raw.startswith(PREFIX) else PREFIX + raw.lstrip("/")
    _, _, rest = unquote(urlsplit(url).path)[len(PREFIX) :].partition("/")
    if rest.lstrip("/").split("/")[0].lower() == "composite":
        raise bad_request("INVALID_BATCH_REQUEST", "a batch subrequest cannot be a composite")
    return url


@router.post("/batch")
async def batch(request: Request, version: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    body = await json_object(request)
    subrequests = body.get("batchRequests")
    if not isinstance(subrequests, list) or not subrequests:
        raise bad_request("INVALID_BATCH_REQUEST", "batchRequests must be a non-empty list")
    if len(subrequests) > MAX_SUBREQUESTS:
        raise bad_request("LIMIT_EXCEEDED", f"at most {MAX_SUBREQUESTS} batch subrequests")
    for sub in subrequests:
        if not isinstance(sub, dict) or not isinstance(sub.get("url"), str):
            raise bad_request("INVALID_BATCH_REQUEST", "each batch subrequest needs method and url")
        if str(sub.get("method", "")).upper() not in METHODS:
            raise bad_request("INVALID_BATCH_REQUEST", "a batch subrequest method is invalid")
    halt = truthy(body.get("haltOnError"))
    results: list[dict[str, Any]] = []
    halted = False
    async with subrequests_client(request) as (client, headers):
        for sub in subrequests:
            if halted:
                results.append({"statusCode": 412, "result": HALTED})
                continue
            method = str(sub["method"]).upper()
            try:
                status, answer = await send_subrequest(
                    client, headers, method, _url(sub["url"]), sub.get("richInput")
                )
            except SfError as refused:
                status, answer = refused.status, refused.body()
            results.append({"statusCode": status, "result": answer})
            halted = halt and status >= 400
    has_errors = any(r["statusCode"] >= 400 for r in results)
    return d.reply(request, {"hasErrors": has_errors, "results": results})
