"""Dialect answers that a real Runtime does not produce on demand, with a Runtime stand-in:
several records on one external id (300, which simple-salesforce maps to
SalesforceMoreThanOneRecord) and the per-user daily API limit (REQUEST_LIMIT_EXCEEDED).
The sfcrm AppService and simple-salesforce are the real ones, over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import SalesforceMoreThanOneRecord, SalesforceRefusedRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from nexus.apps.sfcrm.app import USAGE_REPORT_SECONDS, WORKLOAD, create_app
from nexus.contracts.usage import USAGE_PATH
from nexus.platform.settings import load_settings
from nexus.platform.tls import ensure_local_tls
from nexus.platform.workload import ensure_workload_keys
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
DAILY_LIMIT = 5
IDS = ["001000000000001AAA", "001000000000002AAA"]
#: Client sessions, closed before the servers stop.
SESSIONS: list[requests.Session] = []


REPORTED: dict[str, int] = {}  # user id -> requests the AppService reported


def runtime_stand_in(calls: list[str]) -> Starlette:
    async def exchange(request: Request) -> JSONResponse:
        body = await request.json()
        calls.append("exchange")
        return JSONResponse(
            {
                "delegation": "delegation-for-" + body["credential"],
                "expires_in": 60,
                "org_id": "00D000000000001AAA",
                "user_id": "005000000000" + body["credential"][-6:],
                "session_id": "s",
                "scopes": ["api"],
                "security_epoch": 1,
            }
        )

    async def read(request: Request) -> JSONResponse:
        calls.append("records/read")
        return JSONResponse(
            {"code": "MULTIPLE_RECORDS", "message": "2 records", "fields": dict.fromkeys(IDS, "x")},
            status_code=409,
        )

    async def describe_global(request: Request) -> JSONResponse:
        calls.append("describe/global")
        return JSONResponse([])

    async def usage(request: Request) -> JSONResponse:
        for count in (await request.json())["counts"]:
            REPORTED[count["user_id"]] = REPORTED.get(count["user_id"], 0) + count["requests"]
        totals = [
            {"org_id": "00D000000000001AAA", "user_id": u, "requests": n}
            for u, n in REPORTED.items()
        ]
        return JSONResponse({"day": "2026-12-12", "totals": totals})

    return Starlette(
        routes=[
            Route(USAGE_PATH, usage, methods=["POST"]),
            Route("/internal/v1/identity/exchange", exchange, methods=["POST"]),
            Route("/internal/v1/runtime/records/read", read, methods=["POST"]),
            Route("/internal/v1/runtime/describe/global", describe_global, methods=["POST"]),
        ]
    )


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def dialect(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[str, list[str], Path]]:
    var = Path(tmp_path_factory.mktemp("sfcrm-edges"))
    ensure_workload_keys(var / "secrets" / "workload", [WORKLOAD])
    calls: list[str] = []
    async with serving(runtime_stand_in(calls)) as runtime_url:
        settings = load_settings(
            var_dir=var, runtime_api_url=runtime_url, api_daily_request_limit=DAILY_LIMIT
        )
        tls = ensure_local_tls(var)
        https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
        async with serving(create_app(settings), **https) as url:
            yield url, calls, tls.ca_cert
            for session in SESSIONS:
                session.close()


def salesforce(url: str, token: str, ca: Path) -> Salesforce:
    session = requests.Session()
    session.trust_env = False
    session.verify = str(ca)
    # an idle kept-alive TLS connection holds a stopping uvicorn for the TLS close timeout
    session.headers["Connection"] = "close"
    SESSIONS.append(session)
    return Salesforce(instance_url=url, session_id=token, version="59.0", session=session)


async def test_several_records_on_one_external_id_is_300_with_their_urls(
    dialect: tuple[str, list[str], Path],
) -> None:
    url, calls, ca = dialect
    sf = salesforce(url, "token-aaaaaa", ca)
    with pytest.raises(SalesforceMoreThanOneRecord) as many:
        await asyncio.to_thread(sf.Account.get_by_custom_id, "Ext_Id__c", "X-1")
    assert many.value.content == [f"/services/data/v59.0/sobjects/Account/{i}" for i in IDS]
    assert calls.count("records/read") == 1


async def test_the_daily_limit_refuses_the_users_next_request(
    dialect: tuple[str, list[str], Path],
) -> None:
    url, calls, ca = dialect
    sf = salesforce(url, "token-bbbbbb", ca)
    for used in range(1, DAILY_LIMIT + 1):
        await asyncio.to_thread(sf.describe)
        assert sf.api_usage["api-usage"].used == used
        assert sf.api_usage["api-usage"].total == DAILY_LIMIT
    before = calls.count("describe/global")
    with pytest.raises(SalesforceRefusedRequest) as refused:
        await asyncio.to_thread(sf.describe)
    error: Any = refused.value.content
    assert error[0]["errorCode"] == "REQUEST_LIMIT_EXCEEDED"
    assert calls.count("describe/global") == before  # refused before Runtime is asked
    # another user's budget is their own; one exchange per token while the delegation lives
    await asyncio.to_thread(salesforce(url, "token-cccccc", ca).describe)
    assert calls.count("exchange") == 3
    # the AppService reports what it counted to Runtime (the refused request not among it)
    await asyncio.sleep(USAGE_REPORT_SECONDS * 2.5)
    assert REPORTED["005000000000bbbbbb"] == DAILY_LIMIT
    assert REPORTED["005000000000cccccc"] == 1
