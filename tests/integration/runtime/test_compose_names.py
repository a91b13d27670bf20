"""Composed names on both backends: the sfcrm package's Contact and Lead (`Name` composed of
FirstName and LastName, as on Salesforce) and a custom object composed of three parts, saved
through Runtime's `mutate` with real authorization and read back."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.apps import sfcrm
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import ItemResult, MutateItem, MutateRequest
from nexus.contracts.roles import LogicalService
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.runtime.access.service import AccessCache, assign_permission_set
from nexus.runtime.metadata.definitions import InvalidMetadata
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.records.mutate import mutate
from nexus.runtime.records.read import read_selected
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")

OBJECTS = Path(sfcrm.__file__).parent / "package" / "components" / "objects.yaml"


def _text(name: str, length: int, **extra: Any) -> dict[str, Any]:
    return {"api_name": name, "label": name, "type": "text", "length": length, **extra}


PERSON = {
    "api_name": "Person__c",
    "label": "Person",
    "plural_label": "People",
    "key_prefix": "a0P",
    "sharing_model": "ReadWrite",
    "name_field": _text("Name", 100, composed_of=["Given__c", "Middle__c", "Family__c"]),
    "fields": [_text("Given__c", 30), _text("Middle__c", 30), _text("Family__c", 30)],
}


def metadata() -> dict[str, Any]:
    package = yaml.safe_load(OBJECTS.read_text())["components"]
    objects = {c["key"]: copy.deepcopy(c["definition"]) for c in package if c["kind"] == "object"}
    names = ("Account", "Contact", "Lead")
    return {
        "objects": [*(objects[n] for n in names), PERSON],
        "permission_sets": [
            {
                "api_name": "Compose_Editor",
                "label": "Compose editor",
                "objects": [
                    {"object": n, "create": True, "read": True, "edit": True, "all_fields": "edit"}
                    for n in (*names, "Person__c")
                ],
            }
        ],
        "validation_rules": [
            {
                "api_name": "No_Forbidden_Person",
                "object": "Person__c",
                "formula": "CONTAINS(Name, 'Forbidden')",
                "error_message": "that name is forbidden",
                "error_field": "Name",
            }
        ],
    }


@dataclass
class World:
    engine: AsyncEngine
    org_id: str
    user_id: str
    metadata: MetadataCache
    access: AccessCache

    def caller(self) -> TrustedCall:
        return TrustedCall(
            org_id=self.org_id,
            user_id=self.user_id,
            session_id="0Ak000000000000AAA",
            client_id=None,
            scopes=frozenset({"api"}),
            security_epoch=0,
            via="delegation",
        )

    async def save(self, *items: MutateItem) -> list[ItemResult]:
        caller = self.caller()
        async with unit_of_work(session_factory(self.engine)) as session:
            view = await self.metadata.view(session, self.org_id)
            access = await self.access.for_caller(session, caller)
            answer = await mutate(
                session,
                view=view,
                access=access,
                caller=caller,
                request=MutateRequest(items=list(items)),
            )
        return answer.results

    async def created(self, obj: str, **fields: Any) -> str:
        [result] = await self.save(MutateItem(op="create", object=obj, fields=fields))
        assert result.success, result.errors
        assert result.id
        return result.id

    async def name(self, record_id: str) -> Any:
        caller = self.caller()
        async with unit_of_work(session_factory(self.engine), readonly=True) as session:
            view = await self.metadata.view(session, self.org_id)
            access = await self.access.for_caller(session, caller)
            record = await read_selected(
                session,
                view=view,
                access=access,
                object_name=None,
                record_id=record_id,
                fields=["Name"],
            )
        return record.fields["Name"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(backend: Backend) -> AsyncIterator[World]:
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    async with unit_of_work(session_factory(engine)) as session:
        repo = IdentityRepository(session)
        org_id = await identity.create_org(repo, name="Compose")
        user_id = await identity.create_user(
            repo, org_id=org_id, username="rep@compose.test", password=None, is_admin=False
        )
    await apply_metadata(engine, org_id=org_id, raw=metadata())
    async with unit_of_work(session_factory(engine)) as session:
        await assign_permission_set(
            session, org_id=org_id, user_id=user_id, permission_set="Compose_Editor"
        )
    yield World(engine, org_id, user_id, MetadataCache(), AccessCache())
    await engine.dispose()


def update(record_id: str, **fields: Any) -> MutateItem:
    return MutateItem(op="update", id=record_id, fields=fields)


async def test_a_contact_is_named_from_first_and_last_name(world: World) -> None:
    ada = await world.created("Contact", FirstName="Ada", LastName="Lovelace", Email="a@x.test")
    assert await world.name(ada) == "Ada Lovelace"
    lead = await world.created("Lead", FirstName="Grace", LastName="Hopper", Company="Navy")
    assert await world.name(lead) == "Grace Hopper"


async def test_last_name_alone_is_the_name(world: World) -> None:
    contact = await world.created("Contact", LastName="Lovelace")
    assert await world.name(contact) == "Lovelace"
    blank_first = await world.created("Contact", FirstName="  ", LastName=" Byron ")
    assert await world.name(blank_first) == "Byron"  # no stray spaces


async def test_changing_a_part_recomposes_the_name(world: World) -> None:
    contact = await world.created("Contact", FirstName="Ada", LastName="Byron")
    [renamed] = await world.save(update(contact, LastName="Lovelace"))
    assert renamed.success, renamed.errors
    assert await world.name(contact) == "Ada Lovelace"
    [first_gone] = await world.save(update(contact, FirstName=None))
    assert first_gone.success, first_gone.errors
    assert await world.name(contact) == "Lovelace"
    [untouched] = await world.save(update(contact, Email="ada@x.test"))
    assert untouched.success, untouched.errors
    assert await world.name(contact) == "Lovelace"


async def test_a_name_the_save_sets_wins(world: World) -> None:
    contact = await world.created("Contact", Name="Countess of Lovelace", LastName="Lovelace")
    assert await world.name(contact) == "Countess of Lovelace"
    [edited] = await world.save(update(contact, Title="Analyst"))
    assert edited.success, edited.errors
    assert await world.name(contact) == "Countess of Lovelace"  # no part changed
    [both] = await world.save(update(contact, FirstName="Augusta", Name="Augusta Ada King"))
    assert both.success, both.errors
    assert await world.name(contact) == "Augusta Ada King"
    [part] = await world.save(update(contact, FirstName="Ada"))
    assert part.success, part.errors
    assert await world.name(contact) == "Ada Lovelace"
    [cleared] = await world.save(update(contact, Name="Lady Ada"))
    assert cleared.success
    [back] = await world.save(update(contact, Name=None))  # nothing given back: composed
    assert back.success, back.errors
    assert await world.name(contact) == "Ada Lovelace"


async def test_last_name_stays_required(world: World) -> None:
    [missing] = await world.save(MutateItem(op="create", object="Contact", fields={"Title": "X"}))
    assert not missing.success
    assert [(e.category, e.fields) for e in missing.errors] == [
        ("REQUIRED_FIELD_MISSING", ["LastName"])
    ]
    [first_only] = await world.save(
        MutateItem(op="create", object="Lead", fields={"FirstName": "Ada", "Company": "Acme"})
    )
    assert [(e.category, e.fields) for e in first_only.errors] == [
        ("REQUIRED_FIELD_MISSING", ["LastName"])
    ]
    contact = await world.created("Contact", FirstName="Ada", LastName="Lovelace")
    [unset] = await world.save(update(contact, LastName=None))
    assert [(e.category, e.fields) for e in unset.errors] == [
        ("REQUIRED_FIELD_MISSING", ["LastName"])
    ]
    assert await world.name(contact) == "Ada Lovelace"  # nothing was saved


async def test_a_batch_of_200_contacts_is_named(world: World) -> None:
    items = [
        MutateItem(
            op="create",
            object="Contact",
            fields={"FirstName": f"First{n}", "LastName": f"Last{n:03d}"} if n % 50 else {},
        )
        for n in range(200)
    ]
    results = await world.save(*items)
    failed = [n for n, r in enumerate(results) if not r.success]
    assert failed == [0, 50, 100, 150]  # no LastName
    assert {e.fields[0] for n in failed for e in results[n].errors} == {"LastName"}
    assert await world.name(results[1].id or "") == "First1 Last001"
    assert await world.name(results[199].id or "") == "First199 Last199"


async def test_any_object_can_compose_its_name(world: World) -> None:
    full = await world.created("Person__c", Given__c="Mary", Middle__c="Ann", Family__c="Evans")
    assert await world.name(full) == "Mary Ann Evans"
    partial = await world.created("Person__c", Given__c="George", Family__c="Eliot")
    assert await world.name(partial) == "George Eliot"
    [nothing] = await world.save(MutateItem(op="create", object="Person__c", fields={}))
    assert [(e.category, e.fields) for e in nothing.errors] == [
        ("REQUIRED_FIELD_MISSING", ["Name"])  # no required part: the name itself is required
    ]
    # validation rules see the composed name
    [forbidden] = await world.save(
        MutateItem(op="create", object="Person__c", fields={"Given__c": "Forbidden"})
    )
    assert [(e.category, e.message) for e in forbidden.errors] == [
        ("VALIDATION_RULE", "that name is forbidden")
    ]


async def test_the_metadata_api_refuses_a_bad_composition(world: World) -> None:
    bad = copy.deepcopy(PERSON)
    bad["fields"].append({"api_name": "Age__c", "label": "Age", "type": "number"})
    bad["name_field"] = _text("Name", 100, composed_of=["Given__c", "Nickname__c", "Age__c"])
    with pytest.raises(InvalidMetadata) as refused:
        await apply_metadata(world.engine, org_id=world.org_id, raw={"objects": [bad]})
    assert [(p.path, p.message) for p in refused.value.problems] == [
        (
            "objects[0].name_field.composed_of[1]",
            "no field 'Nickname__c' on Person__c to compose the name of",
        ),
        (
            "objects[0].name_field.composed_of[2]",
            "'Age__c' is number: a name is composed of text fields",
        ),
    ]
    # nothing of the refused batch was stored: the three-part name still composes
    still = await world.created("Person__c", Given__c="A", Middle__c="B", Family__c="C")
    assert await world.name(still) == "A B C"
