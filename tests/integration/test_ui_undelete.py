"""Undelete through the sfcrm UI API (`POST ui-api/records/{id}/undelete`) against a real
Runtime over real HTTP, on both databases: a deleted record shows in the recycle bin query
the browser uses (queryAll), comes back with its cascaded children, and Runtime refuses
whoever may not delete it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
V = "/services/data/v62.0"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("ui-undelete")) as running:
        yield running


async def call(stack: UiStack, user: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        return await client.request(method, f"{V}/{path}", headers=stack.headers(user), **kwargs)


async def recycle_bin(stack: UiStack, user: str) -> list[str]:
    soql = (
        "SELECT Id, Name, LastModifiedDate FROM Account WHERE IsDeleted = true "
        "ORDER BY LastModifiedDate DESC LIMIT 50"
    )
    reply = await call(stack, user, "GET", "queryAll", params={"q": soql})
    assert reply.status_code == 200, reply.text
    return [r["Name"] for r in reply.json()["records"]]


async def test_a_deleted_account_comes_back_with_its_contact(stack: UiStack) -> None:
    created = await call(stack, "rep1", "POST", "sobjects/Account", json={"Name": "Bin Co"})
    account = created.json()["id"]
    contact = await call(
        stack,
        "rep1",
        "POST",
        "sobjects/Contact",
        json={"Name": "Bin Person", "LastName": "Person", "AccountId": account},
    )
    contact_id = contact.json()["id"]
    assert (await call(stack, "rep1", "DELETE", f"sobjects/Account/{account}")).status_code == 204
    assert (await call(stack, "rep1", "GET", f"ui-api/record-ui/{account}")).status_code == 404
    assert "Bin Co" in await recycle_bin(stack, "rep1")

    # a Read Only user may not restore it; nobody may restore what is not deleted
    refused = await call(stack, "viewer", "POST", f"ui-api/records/{account}/undelete")
    assert refused.status_code == 403, refused.text
    assert refused.json()[0]["errorCode"] == "INSUFFICIENT_ACCESS_OR_READONLY"

    restored = await call(stack, "rep1", "POST", f"ui-api/records/{account}/undelete")
    assert restored.status_code == 200, restored.text
    assert restored.json() == {"id": account, "success": True, "errors": []}
    page = await call(stack, "rep1", "GET", f"ui-api/record-ui/{account}")
    assert page.status_code == 200
    assert page.json()["records"][account]["fields"]["Name"]["value"] == "Bin Co"
    assert (await call(stack, "rep1", "GET", f"ui-api/record-ui/{contact_id}")).status_code == 200
    assert "Bin Co" not in await recycle_bin(stack, "rep1")

    again = await call(stack, "rep1", "POST", f"ui-api/records/{account}/undelete")
    assert again.status_code == 400, again.text


async def test_unknown_and_malformed_ids_are_not_found(stack: UiStack) -> None:
    for record_id in ("001000000000000AAA", "nope"):
        reply = await call(stack, "rep1", "POST", f"ui-api/records/{record_id}/undelete")
        assert reply.status_code == 404, reply.text
        assert reply.json()[0]["errorCode"] == "NOT_FOUND"
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        anonymous = await client.post(f"{V}/ui-api/records/001000000000000AAA/undelete")
    assert anonymous.status_code == 401
