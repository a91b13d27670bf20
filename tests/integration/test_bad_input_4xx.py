"""Hostile or out-of-range input is the caller's error (4xx in the dialect's or OAuth's error
form), never a 500: a CR/LF in an OAuth parameter, SOQL numbers and date literals past what
the databases or the calendar hold, conditions nested or chained past what the recursive
steps and SQLite take, composite subrequest urls that are malformed or leave /services/data/,
and a number field value past Decimal's 28 digits. A real runtime-api and sfcrm AppService,
both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from nexus.identity import admin
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
V = "/services/data/v62.0"
REDIRECT = "http://127.0.0.1:9/callback"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("bad-input")) as running:
        yield running


async def sfcrm(stack: UiStack, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = stack.headers("rep1") | kw.pop("headers", {})
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=60) as client:
        return await client.request(method, f"{V}{path}", headers=headers, **kw)


async def query(stack: UiStack, soql: str) -> httpx.Response:
    return await sfcrm(stack, "GET", "/query", params={"q": soql})


async def accounts_named(stack: UiStack, name: str) -> int:
    reply = await query(stack, f"SELECT Id FROM Account WHERE Name = '{name}'")
    assert reply.status_code == 200, reply.text
    return int(reply.json()["totalSize"])


def refused(reply: httpx.Response, status: int, code: str) -> str:
    """The dialect's error list with this status and errorCode; its message."""
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert isinstance(body, list), body
    assert body[0]["errorCode"] == code, body
    return str(body[0]["message"])


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("redirect_uri", f"{REDIRECT}\r\nSet-Cookie: sid=attacker"),
        ("redirect_uri", f"{REDIRECT}\n"),
        ("response_type", "code\r\nX-Injected: 1"),
    ],
)
async def test_authorize_refuses_a_control_character_in_a_parameter(
    stack: UiStack, method: str, name: str, value: str
) -> None:
    web = await admin.create_client(
        stack.sessions,
        name=f"Web {method} {name}",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code"],
        scopes=["api"],
        run_as_username=None,
        public=False,
    )
    params = {"response_type": "code", "client_id": web.client_id, "redirect_uri": REDIRECT}
    params[name] = value
    async with httpx.AsyncClient(base_url=stack.runtime_url, timeout=60) as client:
        if method == "GET":
            reply = await client.get("/services/oauth2/authorize", params=params)
        else:
            form = params | {"username": "rep1", "password": "x", "decision": "allow"}
            reply = await client.post("/services/oauth2/authorize", data=form)
    assert reply.status_code == 400, reply.text
    assert "location" not in reply.headers
    assert "set-cookie" not in reply.headers
    assert "control character" in reply.text  # the authorize error page, as for invalid_request


@pytest.mark.parametrize(
    "soql",
    [
        "SELECT Id FROM Account OFFSET 9223372036854775808",
        "SELECT Id FROM Account OFFSET 2001",
        "SELECT Id FROM Account LIMIT 999999999999999999999",
        "SELECT Id FROM Account LIMIT 5 OFFSET " + "9" * 5000,
        "SELECT Id, (SELECT Id FROM Contacts LIMIT 9223372036854775808) FROM Account",
    ],
)
async def test_limit_and_offset_out_of_range_are_refused(stack: UiStack, soql: str) -> None:
    message = refused(await query(stack, soql), 400, "NUMBER_OUTSIDE_VALID_RANGE")
    assert "is at most" in message


@pytest.mark.parametrize("literal", ["LAST_N_DAYS:99999999999", "NEXT_N_DAYS:99999999999"])
async def test_a_date_literal_past_the_calendar_is_refused(stack: UiStack, literal: str) -> None:
    soql = f"SELECT Id FROM Account WHERE CreatedDate = {literal}"
    message = refused(await query(stack, soql), 400, "NUMBER_OUTSIDE_VALID_RANGE")
    assert literal.partition(":")[0] in message
    ok = await query(stack, "SELECT Id FROM Account WHERE CreatedDate = LAST_N_DAYS:36500")
    assert ok.status_code == 200, ok.text


def nested_not(levels: int) -> str:
    """`NOT (Name = 'a0' OR NOT (...))`: two levels (a NOT and a parenthesis) per step."""
    condition = "Name = 'z'"
    for i in range(levels // 2):
        condition = f"NOT (Name = 'a{i}' OR {condition})"
    return condition


@pytest.mark.parametrize(
    ("where", "status"),
    [
        ("(" * 5000 + "Name = 'a'" + ")" * 5000, 400),
        ("NOT " * 5000 + "Name = 'a'", 400),
        (" AND ".join(["Name='a'"] * 3000), 400),
        (" OR ".join(["Name='a'"] * 3000), 400),
        ("Name = 'a' OR " + nested_not(22), 400),
        ("Name = 'a' OR " + nested_not(20), 200),  # the deepest accepted reaches the database
        ("NOT (" + " AND ".join(["CreatedDate = TODAY"] * 300) + ")", 200),  # the longest
        ("NOT (" + " AND ".join(["CreatedDate = TODAY"] * 301) + ")", 400),
    ],
)
async def test_conditions_past_the_depth_and_size_bounds_are_refused(
    stack: UiStack, where: str, status: int
) -> None:
    reply = await query(stack, f"SELECT Id FROM Account WHERE {where}")
    if status == 200:
        assert reply.status_code == 200, reply.text
    else:
        refused(reply, 400, "MALFORMED_QUERY")


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", f"{V}/query?q=" + "x" * 70_000),
        ("GET", f"{V}/query?q=" + "é" * 30_000),  # past 64 KB once percent-encoded
        ("POST", f"{V}/sobjects/Account\x00"),
        ("POST", f"{V}/sobjects/Account\r\nX-Injected: 1"),
        ("GET", f"{V}/../../../readyz"),
        ("GET", f"{V}/../../../version"),
        ("GET", f"{V}/%2e%2e/%2E%2E/%2e%2e/readyz"),
        ("POST", f"{V}/sobjects/../../../../readyz"),
    ],
)
@pytest.mark.parametrize("records_only", [False, True])  # run one by one / as one Runtime call
async def test_composite_refuses_a_malformed_or_escaping_subrequest_url(
    stack: UiStack, method: str, url: str, records_only: bool
) -> None:
    marker = f"Composite {method} {len(url)} {records_only}"
    sub: dict[str, Any] = {"method": method, "url": url, "referenceId": "bad"}
    if method == "POST":
        sub["body"] = {"Name": marker}
    fine: dict[str, Any] = {"method": "GET", "url": f"{V}/query?q=SELECT+Id+FROM+Account"}
    if records_only:
        fine = {"method": "POST", "url": f"{V}/sobjects/Account", "body": {"Name": "Companion"}}
    fine["referenceId"] = "fine"
    reply = await sfcrm(stack, "POST", "/composite", json={"compositeRequest": [sub, fine]})
    assert reply.status_code == 200, reply.text
    bad, ok = reply.json()["compositeResponse"]
    assert bad["referenceId"] == "bad"
    assert bad["httpStatusCode"] == 400, bad
    assert bad["body"][0]["errorCode"] == "INVALID_INPUT", bad
    assert ok["httpStatusCode"] == (201 if records_only else 200), ok
    assert await accounts_named(stack, marker) == 0


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("AnnualRevenue", "1000000000000000000000000000000"),
        ("NumberOfEmployees", "1e30"),
        ("AnnualRevenue", '"1E+999999"'),
    ],
)
async def test_a_number_past_28_digits_is_outside_the_valid_range(
    stack: UiStack, field: str, raw: str
) -> None:
    marker = f"Huge {field} {len(raw)}"
    body = f'{{"Name": "{marker}", "{field}": {raw}}}'
    json_type = {"content-type": "application/json"}
    reply = await sfcrm(stack, "POST", "/sobjects/Account", content=body, headers=json_type)
    message = refused(reply, 400, "NUMBER_OUTSIDE_VALID_RANGE")
    assert "outside the valid range" in message
    assert reply.json()[0]["fields"] == [field]
    assert await accounts_named(stack, marker) == 0


DEEP_JSON = "[" * 100_000 + "]" * 100_000  # past the JSON parser's recursion limit


async def test_a_body_nested_past_the_json_parser_is_a_parse_error(stack: UiStack) -> None:
    dialect = await sfcrm(
        stack,
        "POST",
        "/sobjects/Account",
        content=DEEP_JSON,
        headers={"Content-Type": "application/json"},
    )
    refused(dialect, 400, "JSON_PARSER_ERROR")
    async with httpx.AsyncClient(base_url=stack.runtime_url, timeout=60) as client:
        plain = await client.post(  # a FastAPI body model: the Nexus envelope
            "/admin/v1/runtime/users",
            content=DEEP_JSON,
            headers=stack.headers("admin") | {"Content-Type": "application/json"},
        )
    assert plain.status_code == 400, plain.text
    assert plain.json()["code"] == "MALFORMED_BODY"
