"""After-save flows inside the mutation transaction: what is enqueued, what is not, at what
statement cost, and what metadata is refused; and that the commit wakes an idle outbox
runner (its doorbell, docs/adr/0055); both backends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import func, select

from nexus.contracts.records import MutateItem, MutateRequest
from nexus.platform.db.engine import reading, session_factory, unit_of_work
from nexus.platform.service_app import ServiceState
from nexus.platform.settings import load_settings
from nexus.runtime.metadata.definitions import InvalidMetadata
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.outbox import models as outbox_tables
from nexus.runtime.outbox.worker import OutboxRunner
from nexus.runtime.records.mutate import AllOrNoneRolledBack, mutate
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)
from tests.integration.runtime.test_statement_budget import counting

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLOWS = {
    "flows": [
        {
            "api_name": "Welcome_Note",
            "object": "Account",
            "when": "after_save",
            "trigger": "create",
            "after_save": [
                {
                    "kind": "create_record",
                    "object": "Note__c",
                    "fields": {"Name": "'Welcome ' & Name", "Account__c": "Id"},
                },
                {
                    "kind": "webhook",
                    "endpoint": "crm-hook",
                    "event": "account.created",
                    "payload": {
                        "id": "Id",
                        "name": "Name",
                        "revenue": "Revenue__c",
                        "owner": "Owner.Name",
                    },
                },
            ],
        },
        {
            "api_name": "Note_Touches_Account",
            "object": "Note__c",
            "when": "after_save",
            "entry_condition": "NOT(ISBLANK(Name))",
            "after_save": [
                {
                    "kind": "update_record",
                    "lookup": "Account__c",
                    "fields": {"Secret__c": "'last note: ' & Name & ' on ' & Account__r.Name"},
                }
            ],
        },
    ]
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def flows(world: World) -> AsyncIterator[World]:
    await apply_metadata(world.engine, org_id=world.org_id, raw=FLOWS)
    yield world


async def outbox(subject: World) -> list[dict[str, Any]]:
    items = outbox_tables.outbox.items
    async with reading(subject.engine) as conn:
        rows = await conn.execute(
            select(items.c.id, items.c.queue_class, items.c.target_key, items.c.payload).order_by(
                items.c.id
            )
        )
        return [{"id": r[0], "queue": r[1], "target_key": r[2], **json.loads(r[3])} for r in rows]


async def test_a_create_enqueues_each_action_with_the_saved_values(flows: World) -> None:
    before = len(await outbox(flows))
    made = await flows.mutate("rep1", create("Account", Name="Acme", Revenue__c=1250.5))
    account = made.results[0].id
    assert made.results[0].success, made.results[0].errors
    new = sorted((await outbox(flows))[before:], key=lambda i: str(i["queue"]))
    assert [(i["queue"], i["kind"], i["flow"]) for i in new] == [
        ("record", "create_record", "Welcome_Note"),
        ("webhook", "webhook", "Welcome_Note"),
    ]
    note, hook = new
    assert note["fields"] == {"Name": "Welcome Acme", "Account__c": account}
    assert note["target_object"] == "Note__c"
    assert note["user_id"] == flows.users["rep1"]
    assert note["record_id"] == account
    assert note["depth"] == 1
    assert hook["endpoint"] == "crm-hook"
    assert "url" not in hook
    assert hook["body"]["type"] == "account.created"
    assert hook["body"]["data"] == {
        "id": account,
        "name": "Acme",
        "revenue": 1250.5,
        "owner": "rep1@records.test",
    }
    assert hook["body"]["timestamp"].endswith("Z")
    assert note["flow_version"] >= 1


async def test_an_update_targets_the_lookup_record_and_an_empty_lookup_enqueues_nothing(
    flows: World,
) -> None:
    account = (
        (await flows.mutate("rep1", create("Account", Name="Parent", Revenue__c=1))).results[0].id
    )
    before = len(await outbox(flows))
    made = await flows.mutate(
        "rep1", create("Note__c", Name="n1", Account__c=account), create("Note__c", Name="loose")
    )
    assert all(r.success for r in made.results)
    new = (await outbox(flows))[before:]
    assert [(i["kind"], i["target_id"], i["target_key"]) for i in new] == [
        ("update_record", account, account)  # one in flight per target record
    ]
    assert new[0]["fields"] == {"Secret__c": "last note: n1 on Parent"}
    renamed = await flows.mutate(
        "rep1", MutateItem(op="update", id=made.results[0].id, fields={"Name": "n2"})
    )
    assert renamed.results[0].success
    assert (await outbox(flows))[-1]["fields"] == {"Secret__c": "last note: n2 on Parent"}


async def test_a_rolled_back_mutation_enqueues_nothing(flows: World) -> None:
    before = await outbox(flows)
    refused = await flows.mutate("rep1", create("Account", Name="no revenue"))
    assert refused.results[0].errors[0].category == "REQUIRED_FIELD_MISSING"
    with pytest.raises(AllOrNoneRolledBack) as rolled:  # the endpoint answers its response
        await flows.mutate(
            "rep1",
            create("Account", Name="good", Revenue__c=1),
            create("Account", Name="bad"),
            all_or_none=True,
        )
    assert not any(r.success for r in rolled.value.response.results)
    assert await outbox(flows) == before


async def test_saves_made_by_flow_actions_trigger_no_further_after_save_flows(
    flows: World,
) -> None:
    before = len(await outbox(flows))
    caller = await flows.caller("rep1")
    async with unit_of_work(session_factory(flows.engine)) as session:
        view = await flows.metadata.view(session, flows.org_id)
        access = await flows.access.for_caller(session, caller)
        made = await mutate(
            session,
            view=view,
            access=access,
            caller=caller,
            request=MutateRequest(items=[create("Account", Name="nested", Revenue__c=1)]),
            flow_depth=1,
        )
    assert made.results[0].success
    assert len(await outbox(flows)) == before


async def test_enqueue_statements_do_not_grow_with_the_batch(flows: World) -> None:
    def batch(n: int) -> list[MutateItem]:
        return [create("Account", Name=f"b{n}-{i}", Revenue__c=i) for i in range(n)]

    await flows.mutate("rep1", *batch(1))  # warm caches
    with counting(flows.engine) as one:
        await flows.mutate("rep1", *batch(1))
    with counting(flows.engine) as many:
        await flows.mutate("rep1", *batch(30))
    assert len(one) == len(many), (len(one), len(many))
    outbox_writes = [s for s in many if "runtime_outbox" in s]
    assert len(outbox_writes) <= 4, outbox_writes  # queue policy, clock, insert, queue touch


def after_save(*actions: dict[str, Any], obj: str = "Account") -> dict[str, Any]:
    return {
        "flows": [
            {"api_name": "Bad", "object": obj, "when": "after_save", "after_save": list(actions)}
        ]
    }


@pytest.mark.parametrize(
    ("batch", "path", "message"),
    [
        (
            after_save(
                {
                    "kind": "create_record",
                    "object": "Note__c",
                    "fields": {"Name": "Revenue__c", "Account__c": "Id"},
                }
            ),
            "flows[0].after_save[0].fields.Name",
            "the formula is number, text is needed",
        ),
        (
            after_save({"kind": "create_record", "object": "Nope__c", "fields": {"Name": "'x'"}}),
            "flows[0].after_save[0].object",
            "no object named 'Nope__c'",
        ),
        (
            after_save({"kind": "create_record", "object": "Account", "fields": {"Name": "'x'"}}),
            "flows[0].after_save[0].fields",
            "Account.Revenue__c is required",
        ),
        (
            after_save({"kind": "update_record", "lookup": "Name", "fields": {"Name": "'x'"}}),
            "flows[0].after_save[0].lookup",
            "no lookup field 'Name' on Account",
        ),
        (
            after_save(
                {"kind": "update_record", "lookup": "Account__c", "fields": {"Nope__c": "'x'"}},
                obj="Note__c",
            ),
            "flows[0].after_save[0].fields.Nope__c",
            "no writable field 'Nope__c' on Account",
        ),
        (
            after_save(
                {
                    "kind": "webhook",
                    "endpoint": "x",
                    "event": "e",
                    "url": "https://evil.example/",
                }
            ),
            "flows[0].after_save[0]",
            "never a URL",
        ),
        (
            after_save(
                {"kind": "webhook", "endpoint": "x", "event": "e", "payload": {"a": "Nope"}}
            ),
            "flows[0].after_save[0].payload.a",
            "unknown field Nope",
        ),
        (
            after_save({"kind": "outbox_event", "event": "e"}),
            "flows[0].after_save[0].kind",
            "use webhook",
        ),
    ],
)
async def test_actions_are_checked_when_applied(
    flows: World, batch: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        await apply_metadata(flows.engine, org_id=flows.org_id, raw=batch)
    assert any(p.path == path and message in p.message for p in caught.value.problems), (
        caught.value.problems
    )


async def open_items(subject: World) -> int:
    items = outbox_tables.outbox.items
    async with reading(subject.engine) as conn:
        query = select(func.count()).where(
            items.c.state.in_(("pending", "target_wait", "processing"))
        )
        return int((await conn.execute(query)).scalar_one())


async def until_no_open_items(subject: World, within_s: float) -> None:
    async with asyncio.timeout(within_s):
        while await open_items(subject):  # noqa: ASYNC110 - polling the database
            await asyncio.sleep(0.02)


async def test_each_committed_save_wakes_the_idle_outbox_runner(
    flows: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The runner's idle poll is a minute: only the ring after each commit can make it run
    the items (the note it creates; the webhook, its endpoint unbound, dead at once) in time."""
    monkeypatch.setattr("nexus.runtime.outbox.worker.IDLE_POLL_MS", 60_000)
    runner = OutboxRunner(ServiceState(flows.engine), load_settings(var_dir=tmp_path))
    task = asyncio.create_task(runner.run())
    try:
        await until_no_open_items(flows, 30)  # the earlier tests' items: its first look
        for n in range(3):
            await asyncio.sleep(0.3)  # idle again, with a minute to its next look
            await flows.mutate("rep1", create("Account", Name=f"Woken {n}", Revenue__c=n))
            await until_no_open_items(flows, 15)
    finally:
        runner.stop()
        await task
        await runner.close()
    async with reading(flows.engine) as conn:
        notes = await conn.execute(
            select(func.count())
            .select_from(outbox_tables.outbox.items)
            .where(
                outbox_tables.outbox.items.c.queue_class == "record",
                outbox_tables.outbox.items.c.state == "succeeded",
            )
        )
        assert int(notes.scalar_one()) >= 3
