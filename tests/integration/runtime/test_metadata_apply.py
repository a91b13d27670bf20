"""Metadata apply on both backends: atomic batches, versions, additive DDL, clear refusals."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.identity import service as identity_service
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.runtime.metadata.definitions import InvalidMetadata
from nexus.runtime.metadata.service import apply_metadata
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")
ORG = "00D000000000001AAA"

ACCOUNT: dict[str, Any] = {
    "api_name": "Account",
    "label": "Account",
    "plural_label": "Accounts",
    "key_prefix": "001",
    "sharing_model": "ReadWrite",
    "name_field": {"api_name": "Name", "label": "Account Name", "type": "text", "length": 255},
    "fields": [
        {
            "api_name": "Industry",
            "label": "Industry",
            "type": "picklist",
            "values": [{"value": "Tech"}, {"value": "Retail"}],
            "restricted": True,
        },
        {
            "api_name": "External_Key__c",
            "label": "Key",
            "type": "text",
            "length": 64,
            "external_id": True,
            "unique": True,
        },
    ],
}
INVOICE: dict[str, Any] = {
    "api_name": "Invoice__c",
    "label": "Invoice",
    "plural_label": "Invoices",
    "key_prefix": "a01",
    "sharing_model": "ControlledByParent",
    "name_field": {
        "api_name": "Name",
        "label": "Number",
        "type": "auto_number",
        "format": "INV-{0000}",
    },
    "fields": [
        {
            "api_name": "Account__c",
            "label": "Account",
            "type": "master_detail",
            "reference_to": "Account",
            "relationship_name": "Account__r",
            "child_relationship_name": "Invoices__r",
        },
        {"api_name": "Amount__c", "label": "Amount", "type": "currency", "required": True},
    ],
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(backend: Backend) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    async with unit_of_work(session_factory(engine)) as session:
        repo = IdentityRepository(session)
        await repo.insert_org(org_id=ORG, name="Test", now_ms=0)
        await identity_service.create_role(repo, org_id=ORG, name="Sales")
    yield engine
    await engine.dispose()


async def columns(engine: AsyncEngine, table: str) -> dict[str, str]:
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda c: (
                {col["name"]: str(col["type"]) for col in inspect(c).get_columns(table)}
                if inspect(c).has_table(table)
                else {}
            )
        )


async def count(engine: AsyncEngine, sql: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(sql))).scalar_one())


async def test_a_batch_creates_versions_and_tables(engine: AsyncEngine) -> None:
    result = await apply_metadata(engine, org_id=ORG, raw={"objects": [ACCOUNT, INVOICE]})
    assert result.state == "active"
    assert {(v["name"], v["version"]) for v in result.versions} == {
        ("Account", 1),
        ("Invoice__c", 1),
    }
    assert result.schema_generation == 1
    invoice = await columns(engine, "rt_invoice__c")
    assert {
        "org_id",
        "id",
        "owner_id",
        "row_version",
        "is_deleted",
        "name",
        "account__c",
        "amount__c",
    } <= set(invoice)
    again = await apply_metadata(engine, org_id=ORG, raw={"objects": [ACCOUNT, INVOICE]})
    assert again.versions == []
    assert sorted(again.unchanged) == ["Account", "Invoice__c"]
    assert again.schema_generation == 1


async def test_an_added_field_is_a_new_version_and_a_new_column(engine: AsyncEngine) -> None:
    account = copy.deepcopy(ACCOUNT)
    account["fields"].append({"api_name": "Website", "label": "Website", "type": "url"})
    result = await apply_metadata(engine, org_id=ORG, raw={"objects": [account]})
    assert result.versions == [{"kind": "object", "name": "Account", "version": 2}]
    assert result.schema_generation == 2
    assert "website" in await columns(engine, "rt_account")
    label_only = copy.deepcopy(account)
    label_only["label"] = "Customer"
    relabeled = await apply_metadata(engine, org_id=ORG, raw={"objects": [label_only]})
    assert relabeled.versions[0]["version"] == 3
    assert relabeled.schema_generation == 2  # no DDL for a label change


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            lambda o: o["fields"].append({"api_name": "X", "label": "X", "type": "blob"}),
            "objects[0].fields[3].type",
            "Input should be",
        ),
        (
            lambda o: o["fields"].append({"api_name": "Industry", "label": "I", "type": "email"}),
            "objects[0].fields[3].api_name",
            "duplicate field",
        ),
        (
            lambda o: o["fields"].append(
                {
                    "api_name": "Parent__c",
                    "label": "P",
                    "type": "lookup",
                    "reference_to": "Nope",
                    "relationship_name": "Parent__r",
                }
            ),
            "objects[0].fields[3].reference_to",
            "no object named 'Nope'",
        ),
        (lambda o: o.update(key_prefix="a01"), "objects[0].key_prefix", "used by Invoice__c"),
        (lambda o: o.update(key_prefix="005"), "objects[0].key_prefix", "reserved"),
        (
            lambda o: o["fields"].append({"api_name": "Select", "label": "S", "type": "email"}),
            "objects[0].fields[3].api_name",
            "reserved word",
        ),
        (
            lambda o: o["fields"].append({"api_name": "A" * 41, "label": "L", "type": "email"}),
            "objects[0].fields[3].api_name",
            "at most 40",
        ),
        (
            lambda o: o["fields"].__setitem__(
                1, {**o["fields"][1], "type": "email", "length": None}
            ),
            "objects[0].fields.External_Key__c",
            "is refused",
        ),
        (lambda o: o["fields"].pop(0), "objects[0].fields", "additive only"),
    ],
)
async def test_invalid_metadata_is_refused_with_its_path_and_stores_nothing(
    engine: AsyncEngine, change: Any, path: str, message: str
) -> None:
    account = copy.deepcopy(ACCOUNT)
    account["fields"].append({"api_name": "Website", "label": "Website", "type": "url"})
    change(account)
    new_object = {
        **INVOICE,
        "api_name": "Never__c",
        "key_prefix": "a0N",
        "fields": [INVOICE["fields"][1]],
        "sharing_model": "Private",
    }
    definitions_before = await count(engine, "SELECT COUNT(*) FROM runtime_definition")
    with pytest.raises(InvalidMetadata) as caught:
        await apply_metadata(engine, org_id=ORG, raw={"objects": [account, new_object]})
    assert any(p.path == path and message in p.message for p in caught.value.problems), (
        caught.value.problems
    )
    assert await count(engine, "SELECT COUNT(*) FROM runtime_definition") == definitions_before
    assert await columns(engine, "rt_never__c") == {}


SALES_ACCESS = {
    "api_name": "Sales_User",
    "label": "Sales user",
    "objects": [
        {"object": "Account", "create": True, "read": True, "edit": True, "all_fields": "read"}
    ],
    "fields": [{"field": "Account.Industry", "read": True, "edit": True}],
}
TECH_RULE = {
    "api_name": "Tech_Accounts",
    "label": "Tech accounts to sales",
    "object": "Private_Thing__c",
    "criteria": [{"field": "Kind__c", "value": "Tech"}],
    "share_with_role": "Sales",
    "include_subordinates": True,
}
PRIVATE_THING = {
    "api_name": "Private_Thing__c",
    "label": "Thing",
    "plural_label": "Things",
    "key_prefix": "a0P",
    "sharing_model": "Private",
    "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
    "fields": [{"api_name": "Kind__c", "label": "Kind", "type": "text", "length": 20}],
}


async def test_permission_sets_and_sharing_rules_are_versioned_and_advance_the_epoch(
    engine: AsyncEngine,
) -> None:
    epoch = "SELECT security_epoch FROM identity_org"
    before = await count(engine, epoch)
    result = await apply_metadata(
        engine,
        org_id=ORG,
        raw={
            "objects": [PRIVATE_THING],
            "permission_sets": [SALES_ACCESS],
            "sharing_rules": [TECH_RULE],
        },
    )
    kinds = {(v["kind"], v["name"]) for v in result.versions}
    assert ("permission_set", "Sales_User") in kinds
    assert ("sharing_rule", "Tech_Accounts") in kinds
    assert await count(engine, epoch) == before + 1


@pytest.mark.parametrize(
    ("batch", "path", "message"),
    [
        (
            {"permission_sets": [{**SALES_ACCESS, "objects": [{"object": "Nope", "read": True}]}]},
            "permission_sets[0].objects[0].object",
            "no object named 'Nope'",
        ),
        (
            {
                "permission_sets": [
                    {**SALES_ACCESS, "fields": [{"field": "Account.Nope", "read": True}]}
                ]
            },
            "permission_sets[0].fields[0].field",
            "no field 'Account.Nope'",
        ),
        (
            {
                "permission_sets": [
                    {**SALES_ACCESS, "objects": [{"object": "Account", "edit": True}]}
                ]
            },
            "permission_sets[0].objects[0]",
            "need read",
        ),
        (
            {"sharing_rules": [{**TECH_RULE, "share_with_role": "Nobody"}]},
            "sharing_rules[0].share_with_role",
            "no role named 'Nobody'",
        ),
        (
            {"sharing_rules": [{**TECH_RULE, "object": "Account"}]},
            "sharing_rules[0].object",
            "nothing to share",
        ),
    ],
)
async def test_invalid_access_metadata_names_its_path(
    engine: AsyncEngine, batch: dict, path: str, message: str
) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        await apply_metadata(engine, org_id=ORG, raw=batch)
    assert any(p.path.startswith(path) and message in p.message for p in caught.value.problems), (
        caught.value.problems
    )
