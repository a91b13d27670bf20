"""Validation rules and before-save flows inside the mutation transaction, both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from nexus.contracts.records import MutateItem
from nexus.runtime.metadata.definitions import InvalidMetadata
from nexus.runtime.metadata.service import apply_metadata
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")

LOGIC = {
    "validation_rules": [
        {
            "api_name": "Revenue_Positive",
            "object": "Account",
            "formula": "Revenue__c < 0",
            "error_message": "Revenue cannot be negative",
            "error_field": "Revenue__c",
        },
        {
            "api_name": "Tech_Needs_Key",
            "object": "Account",
            "formula": "ISPICKVAL(Industry, 'Tech') && ISBLANK(Ext_Key__c)",
            "error_message": "Tech accounts need a key",
        },
        {
            "api_name": "Inactive_Rule",
            "object": "Account",
            "formula": "TRUE",
            "error_message": "never",
            "active": False,
        },
    ],
    "flows": [
        {
            "api_name": "Suffix_B",
            "object": "Account",
            "order": 20,
            "trigger": "create",
            "updates": [{"field": "Name", "formula": "Name & '-b'"}],
        },
        {
            "api_name": "First_Trim",
            "object": "Account",
            "order": 10,
            "updates": [{"field": "Name", "formula": "TRIM(Name)"}],
        },
        {
            "api_name": "Suffix_A",
            "object": "Account",
            "order": 15,
            "trigger": "create",
            "updates": [{"field": "Name", "formula": "Name & '-a'"}],
        },
        {
            "api_name": "Tag_Big",
            "object": "Account",
            "order": 30,
            "trigger": "create",
            "entry_condition": "Revenue__c > 1000",
            "updates": [{"field": "Industry", "formula": "'Retail'"}],
        },
        {
            "api_name": "Count_Updates",
            "object": "Account",
            "order": 40,
            "trigger": "update",
            "entry_condition": "ISCHANGED(Name)",
            "updates": [{"field": "Revenue__c", "formula": "PRIORVALUE(Revenue__c) + 1"}],
        },
    ],
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def logic(world: World) -> AsyncIterator[World]:
    await apply_metadata(world.engine, org_id=world.org_id, raw=LOGIC)
    yield world


async def test_flows_run_in_order_before_validation(logic: World) -> None:
    result = (
        await logic.mutate("rep1", create("Account", Name="  acme  ", Revenue__c=5000))
    ).results[0]
    assert result.success, result.errors
    record = await logic.read("rep1", result.id or "")
    assert record.fields["Name"] == "acme-a-b"  # order 10, 15, 20 (not definition order)
    assert record.fields["Industry"] == "Retail"  # entry condition matched on create


async def test_all_failing_rules_are_reported_together(logic: World) -> None:
    result = (
        await logic.mutate("rep1", create("Account", Name="x", Revenue__c=-1, Industry="Tech"))
    ).results[0]
    assert not result.success
    messages = {e.message for e in result.errors}
    assert messages == {"Revenue cannot be negative", "Tech accounts need a key"}
    assert {tuple(e.fields) for e in result.errors} == {("Revenue__c",), ()}
    assert all(e.category == "VALIDATION_RULE" for e in result.errors)


async def test_update_flows_see_prior_values_and_do_not_recurse(logic: World) -> None:
    account = (
        (await logic.mutate("rep1", create("Account", Name="base", Revenue__c=10))).results[0].id
    )
    renamed = await logic.mutate(
        "rep1", MutateItem(op="update", id=account, fields={"Name": "next"})
    )
    assert renamed.results[0].success, renamed.results[0].errors
    record = await logic.read("rep1", account or "")
    assert record.fields["Revenue__c"] == 11.0  # ran once: the flow's own change triggers nothing
    assert record.fields["Name"] == "next"
    untouched = await logic.mutate(
        "rep1", MutateItem(op="update", id=account, fields={"Revenue__c": 50})
    )
    assert untouched.results[0].success
    assert (await logic.read("rep1", account or "")).fields["Revenue__c"] == 50.0


async def test_an_update_is_validated_against_the_merged_record(logic: World) -> None:
    account = (await logic.mutate("rep1", create("Account", Name="v", Revenue__c=1))).results[0].id
    bad = await logic.mutate(
        "rep1", MutateItem(op="update", id=account, fields={"Industry": "Tech"})
    )
    assert bad.results[0].errors[0].message == "Tech accounts need a key"


@pytest.mark.parametrize(
    ("batch", "path", "message"),
    [
        (
            {
                "validation_rules": [
                    {
                        "api_name": "Bad",
                        "object": "Account",
                        "formula": "Revenue__c +",
                        "error_message": "m",
                    }
                ]
            },
            "validation_rules[0].formula",
            "syntax error",
        ),
        (
            {
                "validation_rules": [
                    {
                        "api_name": "Bad",
                        "object": "Account",
                        "formula": "Revenue__c + 1",
                        "error_message": "m",
                    }
                ]
            },
            "validation_rules[0].formula",
            "the formula is number, boolean is needed",
        ),
        (
            {
                "flows": [
                    {
                        "api_name": "Bad",
                        "object": "Account",
                        "updates": [{"field": "Revenue__c", "formula": "'text'"}],
                    }
                ]
            },
            "flows[0].updates[0].formula",
            "the formula is text, number is needed",
        ),
        (
            {
                "flows": [
                    {
                        "api_name": "Bad",
                        "object": "Account",
                        "entry_condition": "Nope__c",
                        "updates": [{"field": "Name", "formula": "'x'"}],
                    }
                ]
            },
            "flows[0].entry_condition",
            "unknown field Nope__c",
        ),
    ],
)
async def test_formulas_are_checked_when_saved(
    logic: World, batch: dict, path: str, message: str
) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        await apply_metadata(logic.engine, org_id=logic.org_id, raw=batch)
    assert any(p.path == path and message in p.message for p in caught.value.problems), (
        caught.value.problems
    )


async def test_formula_fields_are_computed_on_read(logic: World) -> None:
    from nexus.platform.db.engine import session_factory, unit_of_work  # noqa: PLC0415
    from nexus.runtime.describe import describe_object  # noqa: PLC0415
    from nexus.runtime.query.engine import run_query  # noqa: PLC0415
    from nexus.runtime.query.parser import SoqlError  # noqa: PLC0415
    from tests.integration.runtime.test_records import METADATA  # noqa: PLC0415

    account = next(o for o in METADATA["objects"] if o["api_name"] == "Account")
    formulas = [
        {
            "api_name": "Band__c",
            "label": "Band",
            "type": "formula",
            "return_type": "text",
            "formula": "IF(Revenue__c > 1000, 'big', 'small')",
        },
        {
            "api_name": "Revenue_K__c",
            "label": "Revenue (k)",
            "type": "formula",
            "return_type": "number",
            "formula": "Revenue__c / 1000",
        },
        {
            "api_name": "Initials__c",
            "label": "Initials",
            "type": "formula",
            "return_type": "text",
            "formula": "LEFT(Name, 2)",
        },
    ]
    await apply_metadata(
        logic.engine,
        org_id=logic.org_id,
        raw={"objects": [{**account, "fields": [*account["fields"], *formulas]}]},
    )
    created = (await logic.mutate("admin", create("Account", Name="f", Revenue__c=2500))).results[0]
    record = await logic.read("admin", created.id or "")
    assert record.fields["Band__c"] == "big"
    assert record.fields["Revenue_K__c"] == 2.5
    await logic.mutate("admin", MutateItem(op="update", id=created.id, fields={"Revenue__c": 10}))
    assert (await logic.read("admin", created.id or "")).fields["Band__c"] == "small"
    refused = await logic.mutate(
        "admin", MutateItem(op="update", id=created.id, fields={"Band__c": "x"})
    )
    assert refused.results[0].errors[0].category == "INVALID_FIELD"
    caller = await logic.caller("admin")
    async with unit_of_work(session_factory(logic.engine), readonly=True) as session:
        view = await logic.metadata.view(session, logic.org_id)
        access = await logic.access.for_caller(session, caller)
        fields = {f.name: f for f in describe_object(view, access, "Account").fields}
        soql = (
            "SELECT Name, Band__c, Revenue_K__c, Initials__c FROM Account "
            f"WHERE Band__c = 'small' AND Revenue_K__c < 0.02 AND Id = '{created.id}'"
        )
        selected = await run_query(session, view=view, access=access, soql=soql)
        assert [(r["Band__c"], r["Revenue_K__c"], r["Initials__c"]) for r in selected.records] == [
            ("small", 0.01, "f-")
        ]
        ordered = await run_query(
            session,
            view=view,
            access=access,
            soql="SELECT Revenue__c FROM Account WHERE Revenue_K__c != null "
            "ORDER BY Revenue_K__c DESC, Name",
        )
        revenues = [r["Revenue__c"] for r in ordered.records]
        assert revenues == sorted(revenues, reverse=True)
        assert 10 in revenues
        with pytest.raises(SoqlError, match=r"cannot be filtered or sorted on.*LEFT\(\)"):
            await run_query(
                session,
                view=view,
                access=access,
                soql="SELECT Id FROM Account WHERE Initials__c = 'f-'",
            )
    assert fields["Band__c"].calculated is True
    assert fields["Band__c"].calculated_formula == "IF(Revenue__c > 1000, 'big', 'small')"
    assert fields["Band__c"].createable is False
    with pytest.raises(InvalidMetadata) as caught:
        await apply_metadata(
            logic.engine,
            org_id=logic.org_id,
            raw={
                "objects": [
                    {
                        **account,
                        "fields": [
                            *account["fields"],
                            {**formulas[0], "formula": "Revenue__c + 1"},
                        ],
                    }
                ]
            },
        )
    assert any("formula" in p.path and "text is needed" in p.message for p in caught.value.problems)


async def test_formulas_read_parent_paths(logic: World) -> None:
    """Formula fields, validation rules and before-save flows read `Account__r.Owner.Name`
    style paths; SOQL computes and filters on such a formula field."""
    from nexus.platform.db.engine import session_factory, unit_of_work  # noqa: PLC0415
    from nexus.runtime.query.engine import run_query  # noqa: PLC0415
    from tests.integration.runtime.test_records import METADATA  # noqa: PLC0415

    note = next(o for o in METADATA["objects"] if o["api_name"] == "Note__c")
    label = {
        "api_name": "Account_Label__c",
        "label": "Account label",
        "type": "formula",
        "return_type": "text",
        "formula": "Account__r.Name & ' / ' & Account__r.Owner.Name",
    }
    await apply_metadata(
        logic.engine,
        org_id=logic.org_id,
        raw={
            "objects": [{**note, "fields": [*note["fields"], label]}],
            "validation_rules": [
                {
                    "api_name": "No_Notes_On_Big_Accounts",
                    "object": "Note__c",
                    "formula": "Account__r.Revenue__c > 5000",
                    "error_message": "big accounts take no notes",
                }
            ],
            "flows": [
                {
                    "api_name": "Prefix_Account",
                    "object": "Note__c",
                    "trigger": "create",
                    "updates": [{"field": "Name", "formula": "Account__r.Name & ': ' & Name"}],
                }
            ],
        },
    )
    small, big = (
        await logic.mutate(
            "rep1",
            create("Account", Name="Parent", Revenue__c=100),
            create("Account", Name="Huge", Revenue__c=9000, Industry="Tech", Ext_Key__c="k9"),
        )
    ).results
    parent_name = (await logic.read("rep1", small.id or "")).fields["Name"]
    made = await logic.mutate(
        "rep1",
        create("Note__c", Name="hello", Account__c=small.id),
        create("Note__c", Name="nope", Account__c=big.id),
    )
    assert made.results[0].success, made.results[0].errors
    assert [e.message for e in made.results[1].errors] == ["big accounts take no notes"]
    caller = await logic.caller("rep1")
    async with unit_of_work(session_factory(logic.engine), readonly=True) as session:
        view = await logic.metadata.view(session, logic.org_id)
        access = await logic.access.for_caller(session, caller)
        owner = await run_query(
            session,
            view=view,
            access=access,
            soql=f"SELECT Owner.Name FROM Account WHERE Id = '{small.id}'",
        )
        owner_name = owner.records[0]["Owner"]["Name"]
        queried = await run_query(
            session,
            view=view,
            access=access,
            soql="SELECT Name, Account_Label__c FROM Note__c "
            f"WHERE Account_Label__c LIKE '{parent_name} / %'",
        )
    expected = f"{parent_name} / {owner_name}"
    record = await logic.read("rep1", made.results[0].id or "")
    assert record.fields["Name"] == f"{parent_name}: hello"
    assert record.fields["Account_Label__c"] == expected
    assert [(r["Name"], r["Account_Label__c"]) for r in queried.records] == [
        (f"{parent_name}: hello", expected)
    ]
    with pytest.raises(InvalidMetadata) as caught:
        await apply_metadata(
            logic.engine,
            org_id=logic.org_id,
            raw={
                "validation_rules": [
                    {
                        "api_name": "Bad_Path",
                        "object": "Note__c",
                        "formula": "Account__r.Nope__c > 1",
                        "error_message": "x",
                    },
                    {
                        "api_name": "Bad_Prior",
                        "object": "Note__c",
                        "formula": "ISCHANGED(Account__r.Name)",
                        "error_message": "x",
                    },
                ]
            },
        )
    messages = [p.message for p in caught.value.problems]
    assert any("unknown field Account__r.Nope__c" in m for m in messages), messages
    assert any("not a parent path" in m for m in messages), messages
