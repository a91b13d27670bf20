"""Records through the Runtime use cases, with real authorization, on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.errors import BadRequest, NotFound
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import MutateItem, MutateRequest, MutateResponse, RecordData
from nexus.contracts.roles import LogicalService
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.runtime.access.service import AccessCache, assign_permission_set
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.records.mutate import AllOrNoneRolledBack, mutate
from nexus.runtime.records.read import read_selected, record_access
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT80 = {"api_name": "Name", "label": "Name", "type": "text", "length": 80}
METADATA = {
    "objects": [
        {
            "api_name": "Account",
            "label": "Account",
            "plural_label": "Accounts",
            "key_prefix": "001",
            "sharing_model": "Private",
            "name_field": TEXT80,
            "fields": [
                {
                    "api_name": "Industry",
                    "label": "Industry",
                    "type": "picklist",
                    "restricted": True,
                    "values": [{"value": "Tech"}, {"value": "Retail"}],
                    "track_history": True,
                },
                {"api_name": "Secret__c", "label": "Secret", "type": "text", "length": 40},
                {
                    "api_name": "Ext_Key__c",
                    "label": "Key",
                    "type": "text",
                    "length": 40,
                    "external_id": True,
                    "unique": True,
                },
                {
                    "api_name": "Revenue__c",
                    "label": "Revenue",
                    "type": "currency",
                    "required": True,
                },
            ],
        },
        {
            "api_name": "Invoice__c",
            "label": "Invoice",
            "plural_label": "Invoices",
            "key_prefix": "a01",
            "sharing_model": "ControlledByParent",
            "name_field": {
                "api_name": "Name",
                "label": "No",
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
                }
            ],
        },
        {
            "api_name": "Note__c",
            "label": "Note",
            "plural_label": "Notes",
            "key_prefix": "a02",
            "sharing_model": "ReadWrite",
            "name_field": TEXT80,
            "fields": [
                {
                    "api_name": "Account__c",
                    "label": "Account",
                    "type": "lookup",
                    "reference_to": "Account",
                    "relationship_name": "Account__r",
                    "child_relationship_name": "Notes__r",
                }
            ],
        },
        {
            "api_name": "Contract__c",
            "label": "Contract",
            "plural_label": "Contracts",
            "key_prefix": "a03",
            "sharing_model": "ReadWrite",
            "name_field": TEXT80,
            "fields": [
                {
                    "api_name": "Account__c",
                    "label": "Account",
                    "type": "lookup",
                    "reference_to": "Account",
                    "relationship_name": "Account__r",
                    "on_delete": "restrict",
                }
            ],
        },
    ],
    "permission_sets": [
        {
            "api_name": "Sales",
            "label": "Sales",
            "objects": [
                {"object": "Account", "create": True, "read": True, "edit": True, "delete": True},
                {
                    "object": "Invoice__c",
                    "create": True,
                    "read": True,
                    "edit": True,
                    "delete": True,
                    "all_fields": "edit",
                },
                {
                    "object": "Note__c",
                    "create": True,
                    "read": True,
                    "edit": True,
                    "all_fields": "edit",
                },
                {
                    "object": "Contract__c",
                    "create": True,
                    "read": True,
                    "edit": True,
                    "all_fields": "edit",
                },
            ],
            "fields": [
                {"field": f"Account.{f}", "read": True, "edit": True}
                for f in ("Industry", "Ext_Key__c", "Revenue__c")
            ],
        },
    ],
    "sharing_rules": [
        {
            "api_name": "Tech_To_Support",
            "label": "Tech accounts to support",
            "object": "Account",
            "criteria": [{"field": "Industry", "value": "Tech"}],
            "share_with_role": "Support",
        },
    ],
}


@dataclass
class World:
    engine: AsyncEngine
    org_id: str
    users: dict[str, str]
    metadata: MetadataCache
    access: AccessCache

    async def epoch(self) -> int:
        async with unit_of_work(session_factory(self.engine), readonly=True) as session:
            org = await IdentityRepository(session).org(self.org_id)
        return int(org["security_epoch"]) if org else 0

    async def caller(self, user: str) -> TrustedCall:
        return TrustedCall(
            org_id=self.org_id,
            user_id=self.users[user],
            session_id="0Ak000000000000AAA",
            client_id=None,
            scopes=frozenset({"api"}),
            security_epoch=await self.epoch(),
            via="delegation",
        )

    async def mutate(
        self, user: str, *items: MutateItem, all_or_none: bool = False
    ) -> MutateResponse:
        caller = await self.caller(user)
        async with unit_of_work(session_factory(self.engine)) as session:
            view = await self.metadata.view(session, self.org_id)
            access = await self.access.for_caller(session, caller)
            return await mutate(
                session,
                view=view,
                access=access,
                caller=caller,
                request=MutateRequest(items=list(items), all_or_none=all_or_none),
            )

    async def read(self, user: str, record_id: str, fields: list[str] | None = None) -> RecordData:
        caller = await self.caller(user)
        async with unit_of_work(session_factory(self.engine), readonly=True) as session:
            view = await self.metadata.view(session, self.org_id)
            access = await self.access.for_caller(session, caller)
            return await read_selected(
                session,
                view=view,
                access=access,
                object_name=None,
                record_id=record_id,
                fields=fields,
            )

    async def decisions(self, user: str, ids: list[str]) -> dict[str, dict[str, bool]]:
        caller = await self.caller(user)
        async with unit_of_work(session_factory(self.engine), readonly=True) as session:
            view = await self.metadata.view(session, self.org_id)
            access = await self.access.for_caller(session, caller)
            return await record_access(session, view=view, access=access, ids=ids)


def create(obj: str, key: str | None = None, **fields: Any) -> MutateItem:
    return MutateItem(op="create", object=obj, fields=fields, idempotency_key=key)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(backend: Backend) -> AsyncIterator[World]:
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    users: dict[str, str] = {}
    async with unit_of_work(session_factory(engine)) as session:
        repo = IdentityRepository(session)
        org_id = await identity.create_org(repo, name="Records")
        await identity.create_role(repo, org_id=org_id, name="CEO")
        await identity.create_role(repo, org_id=org_id, name="VP", parent="CEO")
        await identity.create_role(repo, org_id=org_id, name="Rep", parent="VP")
        await identity.create_role(repo, org_id=org_id, name="Support", parent="CEO")
        for name, role, admin in (
            ("admin", "CEO", True),
            ("vp", "VP", False),
            ("rep1", "Rep", False),
            ("rep2", "Rep", False),
            ("support", "Support", False),
            ("outsider", None, False),
        ):
            users[name] = await identity.create_user(
                repo,
                org_id=org_id,
                username=f"{name}@records.test",
                password=None,
                is_admin=admin,
                role_name=role,
            )
    await apply_metadata(engine, org_id=org_id, raw=METADATA)
    async with unit_of_work(session_factory(engine)) as session:
        for name in ("vp", "rep1", "rep2", "support"):
            await assign_permission_set(
                session, org_id=org_id, user_id=users[name], permission_set="Sales"
            )
    yield World(engine, org_id, users, MetadataCache(), AccessCache())
    await engine.dispose()


async def new_account(world: World, user: str = "rep1", **fields: Any) -> str:
    result = await world.mutate(user, create("Account", Name="Acme", Revenue__c=10, **fields))
    assert result.results[0].success, result.results[0].errors
    assert result.results[0].id
    return result.results[0].id


async def test_owner_and_hierarchy_see_a_private_record_peers_do_not(world: World) -> None:
    account = await new_account(world)
    assert account.startswith("001")
    assert len(account) == 18
    record = await world.read("rep1", account)
    assert record.fields["Name"] == "Acme"
    assert record.fields["Revenue__c"] == 10.0
    assert record.fields["OwnerId"] == world.users["rep1"]
    assert record.row_version == 1
    assert (await world.read("vp", account)).id == account  # manager above the owner
    assert (await world.read("admin", account)).id == account
    with pytest.raises(NotFound):
        await world.read("rep2", account)  # a peer: reported as absent
    with pytest.raises(NotFound):
        await world.read("outsider", account)  # no permission on the object at all
    assert await world.decisions("rep2", [account]) == {
        account: {"read": False, "edit": False, "delete": False, "locked": False}
    }
    assert (await world.decisions("rep1", [account[:15]]))[account[:15]]["edit"] is True


async def test_field_level_security_strips_reads_and_refuses_writes(world: World) -> None:
    account = await new_account(world)
    assert "Secret__c" not in (await world.read("rep1", account)).fields
    with pytest.raises(BadRequest, match="no such column"):
        await world.read("rep1", account, ["Secret__c"])
    refused = await world.mutate(
        "rep1", MutateItem(op="update", id=account, fields={"Secret__c": "x"})
    )
    assert refused.results[0].errors[0].category == "INVALID_FIELD"
    updated = await world.mutate(
        "admin", MutateItem(op="update", id=account, fields={"Secret__c": "x"})
    )
    assert updated.results[0].success
    assert (await world.read("admin", account)).fields["Secret__c"] == "x"


async def test_sharing_rules_apply_on_the_next_request(world: World) -> None:
    tech = await new_account(world, Industry="Tech")
    retail = await new_account(world, Industry="Retail")
    assert (await world.read("support", tech)).id == tech
    with pytest.raises(NotFound):
        await world.read("support", retail)
    rule = {**METADATA["sharing_rules"][0], "active": False}
    await apply_metadata(world.engine, org_id=world.org_id, raw={"sharing_rules": [rule]})
    with pytest.raises(NotFound):
        await world.read("support", tech)  # the very next request
    await apply_metadata(world.engine, org_id=world.org_id, raw=METADATA)


async def test_validation_errors_name_their_fields(world: World) -> None:
    results = (
        await world.mutate(
            "rep1",
            create("Account", Name="NoRevenue"),
            create("Account", Name="BadPick", Revenue__c=1, Industry="Mining"),
            create("Account", Name="Unknown", Revenue__c=1, Bogus__c=1),
            create("Account", Revenue__c=1),
        )
    ).results
    assert [r.errors[0].category for r in results] == [
        "REQUIRED_FIELD_MISSING",
        "INVALID_TYPE_VALUE",
        "INVALID_FIELD",
        "REQUIRED_FIELD_MISSING",
    ]
    assert results[0].errors[0].fields == ["Revenue__c"]
    assert results[1].errors[0].fields == ["Industry"]


async def test_duplicates_and_upsert_by_external_id(world: World) -> None:
    first = await world.mutate(
        "rep1",
        MutateItem(
            op="upsert",
            object="Account",
            external_id_field="Ext_Key__c",
            external_id="K-1",
            fields={"Name": "Upserted", "Revenue__c": 1},
        ),
    )
    assert first.results[0].success
    assert first.results[0].created
    second = await world.mutate(
        "rep1",
        MutateItem(
            op="upsert",
            object="Account",
            external_id_field="Ext_Key__c",
            external_id="K-1",
            fields={"Name": "Renamed"},
        ),
    )
    assert second.results[0].success
    assert not second.results[0].created
    assert second.results[0].id == first.results[0].id
    assert (await world.read("rep1", first.results[0].id or "")).fields["Name"] == "Renamed"
    duplicate = await world.mutate(
        "rep1", create("Account", Name="Dup", Revenue__c=1, Ext_Key__c="K-1")
    )
    assert duplicate.results[0].errors[0].category == "DUPLICATE_VALUE"


def upsert(key: str, **fields: Any) -> MutateItem:
    return MutateItem(
        op="upsert", object="Account", external_id_field="Ext_Key__c", external_id=key,
        fields=fields,
    )  # fmt: skip


async def test_an_upsert_does_not_reveal_a_record_the_caller_cannot_see(world: World) -> None:
    """rep2 cannot see rep1's private account: its upsert on that external id answers as a
    create with the value does (the value is taken: what a unique field means), never the
    `NOT_FOUND` that told "a record you cannot see holds it", and changes nothing."""
    hidden = await new_account(world, "rep1", Ext_Key__c="K-hidden")
    with pytest.raises(NotFound):
        await world.read("rep2", hidden)
    fields = {"Name": "Taken?", "Revenue__c": 1}
    upserted = (await world.mutate("rep2", upsert("K-hidden", **fields))).results[0]
    created = (
        await world.mutate("rep2", create("Account", Ext_Key__c="K-hidden", **fields))
    ).results[0]
    assert not upserted.success
    assert upserted.id is None
    assert upserted.errors == created.errors
    assert [e.category for e in upserted.errors] == ["DUPLICATE_VALUE"]
    assert hidden not in str(upserted.errors)
    assert (await world.read("rep1", hidden)).fields["Name"] == "Acme"  # untouched
    fresh = (await world.mutate("rep2", upsert("K-unused", Name="New", Revenue__c=1))).results[0]
    assert fresh.success
    assert fresh.created
    seen = (await world.mutate("vp", upsert("K-hidden", Name="By the manager"))).results[0]
    assert seen.success  # who can see it updates it
    assert not seen.created
    assert seen.id == hidden


@pytest.mark.parametrize("round_", range(3))
async def test_concurrent_updates_with_one_row_version_one_wins(world: World, round_: int) -> None:
    """Writers that all read version N race: exactly one wins, the others get CONFLICT (a
    lost update would show as two winners), and the record holds the winner's value."""
    account = await new_account(world)
    version = (await world.read("rep1", account)).row_version
    results = await asyncio.gather(
        *(
            world.mutate(
                "rep1",
                MutateItem(
                    op="update", id=account, row_version=version, fields={"Name": f"Writer {n}"}
                ),
            )
            for n in range(4)
        ),
        return_exceptions=True,
    )
    won = [
        n
        for n, r in enumerate(results)
        if not isinstance(r, BaseException) and r.results[0].success
    ]
    conflicts = [
        r.results[0].errors[0].category
        for r in results
        if not isinstance(r, BaseException) and not r.results[0].success
    ]
    assert len(won) == 1, results
    assert conflicts == ["CONFLICT"] * 3, results
    after = await world.read("rep1", account)
    assert after.row_version == version + 1
    assert after.fields["Name"] == f"Writer {won[0]}"


async def test_a_delete_and_an_update_of_one_row_version_do_not_both_win(world: World) -> None:
    account = await new_account(world)
    version = (await world.read("rep1", account)).row_version
    update, delete = await asyncio.gather(
        world.mutate(
            "rep1", MutateItem(op="update", id=account, row_version=version, fields={"Name": "U"})
        ),
        world.mutate("rep1", MutateItem(op="delete", id=account, row_version=version)),
    )
    assert [update.results[0].success, delete.results[0].success].count(True) == 1, (
        update,
        delete,
    )


async def test_idempotent_replay_returns_the_original_result(world: World) -> None:
    first = await world.mutate("rep1", create("Account", "idem-1", Name="Once", Revenue__c=1))
    again = await world.mutate("rep1", create("Account", "idem-1", Name="Once", Revenue__c=1))
    assert again.results[0] == first.results[0]
    async with world.engine.connect() as conn:
        count = (
            await conn.execute(text("SELECT COUNT(*) FROM rt_account WHERE name = 'Once'"))
        ).scalar()
    assert count == 1
    reused = await world.mutate("rep1", create("Account", "idem-1", Name="Other", Revenue__c=1))
    assert reused.results[0].errors[0].category == "CONFLICT"


async def test_batches_are_bounded(world: World) -> None:
    with pytest.raises(BadRequest) as caught:
        await world.mutate(
            "rep1", *(create("Account", Name=f"A{i}", Revenue__c=1) for i in range(201))
        )
    assert caught.value.code == "LIMIT_EXCEEDED"


async def test_all_or_none_rolls_back_every_item(world: World) -> None:
    with pytest.raises(AllOrNoneRolledBack) as caught:
        await world.mutate(
            "rep1",
            create("Account", Name="Kept?", Revenue__c=1),
            create("Account", Name="Broken"),
            all_or_none=True,
        )
    assert [r.success for r in caught.value.response.results] == [False, False]
    async with world.engine.connect() as conn:
        assert (
            await conn.execute(text("SELECT COUNT(*) FROM rt_account WHERE name = 'Kept?'"))
        ).scalar() == 0


async def test_delete_cascades_restricts_and_undeletes(world: World) -> None:
    account = await new_account(world)
    invoice = (await world.mutate("rep1", create("Invoice__c", Account__c=account))).results[0]
    assert invoice.success, invoice.errors
    assert (await world.read("vp", invoice.id or "")).fields["Name"].startswith("INV-")
    note = (await world.mutate("rep1", create("Note__c", Name="n", Account__c=account))).results[0]
    deleted = await world.mutate("rep1", MutateItem(op="delete", id=account))
    assert deleted.results[0].success
    with pytest.raises(NotFound):
        await world.read("rep1", invoice.id or "")  # cascaded
    assert (await world.read("rep1", note.id or "")).fields["Account__c"] is None  # set null
    restored = await world.mutate("rep1", MutateItem(op="undelete", id=account))
    assert restored.results[0].success
    assert (await world.read("rep1", invoice.id or "")).id == invoice.id

    guarded = await new_account(world)
    await world.mutate("rep1", create("Contract__c", Name="c", Account__c=guarded))
    blocked = await world.mutate("rep1", MutateItem(op="delete", id=guarded))
    assert blocked.results[0].errors[0].category == "CONFLICT"
    peer = await world.mutate("rep2", MutateItem(op="delete", id=account))
    assert peer.results[0].errors[0].category == "NOT_FOUND"


async def test_history_of_tracked_fields(world: World) -> None:
    from nexus.runtime.records import models as records_tables  # noqa: PLC0415

    account = await new_account(world, Industry="Retail")
    await world.mutate("rep1", MutateItem(op="update", id=account, fields={"Industry": "Tech"}))
    async with world.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    records_tables.field_history.c.field_name,
                    records_tables.field_history.c.old_value,
                    records_tables.field_history.c.new_value,
                ).where(records_tables.field_history.c.record_id == account)
            )
        ).all()
    assert rows == [("Industry", "Retail", "Tech")]


async def test_read_graph_composes_a_record_page(world: World) -> None:
    from nexus.runtime.records.graph import read_graph  # noqa: PLC0415

    account = await new_account(world, Industry="Retail")
    for _ in range(3):
        await world.mutate("rep1", create("Invoice__c", Account__c=account))
    note = (
        await world.mutate("rep1", create("Note__c", Name="hello", Account__c=account))
    ).results[0]
    await world.mutate("rep1", MutateItem(op="update", id=account, fields={"Industry": "Tech"}))
    caller = await world.caller("vp")
    async with unit_of_work(session_factory(world.engine), readonly=True) as session:
        view = await world.metadata.view(session, world.org_id)
        access = await world.access.for_caller(session, caller)
        graph = await read_graph(
            session,
            view=view,
            access=access,
            object_name="Account",
            record_id=account,
            related_page=2,
        )
        note_graph = await read_graph(
            session, view=view, access=access, object_name=None, record_id=note.id or ""
        )
    assert graph.record.id == account
    assert "Secret__c" not in graph.field_order
    lists = {r.object: r for r in graph.related}
    assert len(lists["Invoice__c"].records) == 2
    assert lists["Invoice__c"].has_more is True
    assert lists["Note__c"].records[0].name == "hello"
    assert graph.access == {"read": True, "edit": True, "delete": True, "locked": False}
    assert [(h.field, h.old_value, h.new_value) for h in graph.history] == [
        ("Industry", "Retail", "Tech")
    ]
    assert note_graph.parent_names == {"Account__c": "Acme"}
    assert [s.label for s in graph.sections] == ["Details"]  # no layout: every readable field

    layout = {
        "api_name": "Account_Page",
        "object": "Account",
        "sections": [
            {"label": "Money", "fields": ["Revenue__c", "Secret__c"]},
            {"label": "About", "columns": 1, "fields": ["Name", "Industry"]},
        ],
        "related_lists": ["Note__c", "Invoice__c"],
    }
    await apply_metadata(world.engine, org_id=world.org_id, raw={"layouts": [layout]})
    async with unit_of_work(session_factory(world.engine), readonly=True) as session:
        view = await world.metadata.view(session, world.org_id)
        access = await world.access.for_caller(session, caller)
        laid_out = await read_graph(
            session, view=view, access=access, object_name="Account", record_id=account
        )
    assert [(s.label, s.fields) for s in laid_out.sections] == [
        ("Money", ["Revenue__c"]),
        ("About", ["Name", "Industry"]),
    ]  # Secret__c: FLS-hidden
    assert laid_out.field_order == ["Revenue__c", "Name", "Industry"]
    assert [r.object for r in laid_out.related] == ["Note__c", "Invoice__c"]


async def test_describe_shows_only_what_the_caller_may_see(world: World) -> None:
    from nexus.runtime.describe import describe_global, describe_object  # noqa: PLC0415

    async with unit_of_work(session_factory(world.engine), readonly=True) as session:
        view = await world.metadata.view(session, world.org_id)
        rep = await world.access.for_caller(session, await world.caller("rep1"))
        outsider = await world.access.for_caller(session, await world.caller("outsider"))
    account = describe_object(view, rep, "Account")
    names = {f.name for f in account.fields}
    assert "Secret__c" not in names
    assert {"Name", "Industry", "Revenue__c"} <= names
    assert account.summary.createable is True
    assert describe_global(view, outsider) == []
    with pytest.raises(NotFound):
        describe_object(view, outsider, "Account")


async def test_a_batch_whose_items_set_different_fields_keeps_every_value(world: World) -> None:
    result = await world.mutate(
        "rep1",
        create("Account", Name="Few", Revenue__c=1),
        create("Account", Name="More", Revenue__c=2, Industry="Retail", Ext_Key__c="batch-more"),
    )
    assert all(r.success for r in result.results)
    more = await world.read("rep1", result.results[1].id or "")
    assert (more.fields["Industry"], more.fields["Ext_Key__c"]) == ("Retail", "batch-more")


async def test_record_datetimes_keep_their_milliseconds(world: World) -> None:
    """MariaDB's plain DATETIME kept whole seconds: two changes within one second looked
    simultaneous to a client syncing by SystemModstamp. Twenty creations landing on .000
    each by chance is a one-in-10^60 event."""
    ids = [await new_account(world) for _ in range(20)]
    stamps = [(await world.read("rep1", i)).fields["SystemModstamp"] for i in ids]
    millis = {str(s)[20:23] if isinstance(s, str) else s.microsecond // 1000 for s in stamps}
    assert millis - {"000", 0}, stamps
