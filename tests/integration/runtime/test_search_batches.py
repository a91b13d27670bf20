"""The search index of whole batches: every record of a create batch is findable by each of
its searchable fields, and an update batch replaces exactly the rows whose text it changed
(the index writes one statement per table for the batch, on SQLite in rowid order)."""

from __future__ import annotations

import pytest

from nexus.contracts.records import MAX_BATCH, MutateItem
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)
from tests.integration.runtime.test_search import find, names

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def found_ids(world: World, term: str) -> list[str]:
    """Ids of the Accounts the admin finds for `term` (all of a batch: no default limit)."""
    sosl = f"FIND {{{term}}} RETURNING Account(Id) LIMIT {MAX_BATCH}"
    return sorted(r["Id"] for r in await find(world, "admin", sosl=sosl))


async def test_a_full_batch_is_indexed_and_an_update_batch_replaces_what_it_changed(
    world: World,
) -> None:
    created = await world.mutate(
        "admin",
        *[
            create(
                "Account",
                Name=f"Heronfield{i:03d} Holdings",
                Secret__c=f"Saltmarsh{i:03d}",
                Ext_Key__c=f"heron-{i:03d}",
                Revenue__c=1,
            )
            for i in range(MAX_BATCH)
        ],
    )
    assert all(r.success for r in created.results), created.results[0]
    ids = [r.id or "" for r in created.results]
    assert await found_ids(world, "heronfield*") == sorted(ids)
    for i in (0, 57, 123, MAX_BATCH - 1):
        assert names(await find(world, "admin", term=f"heronfield{i:03d}")) == [
            f"Heronfield{i:03d} Holdings"
        ]
        assert [r["Id"] for r in await find(world, "admin", term=f"saltmarsh{i:03d}")] == [ids[i]]
        assert [r["Id"] for r in await find(world, "admin", term=f"heron-{i:03d}")] == [ids[i]]

    # every other record renamed, its secret cleared; the others re-send an unchanged name
    updated = await world.mutate(
        "admin",
        *[
            MutateItem(
                op="update",
                id=record,
                fields=(
                    {"Name": f"Kingfisher{i:03d} Group", "Secret__c": None}
                    if i % 2 == 0
                    else {"Name": f"Heronfield{i:03d} Holdings"}
                ),
            )
            for i, record in enumerate(ids)
        ],
    )
    assert all(r.success for r in updated.results), updated.results[0]
    renamed = sorted(ids[i] for i in range(0, MAX_BATCH, 2))
    kept = sorted(ids[i] for i in range(1, MAX_BATCH, 2))
    assert await found_ids(world, "kingfisher*") == renamed
    assert await found_ids(world, "heronfield*") == kept
    assert await found_ids(world, "saltmarsh*") == kept
    assert names(await find(world, "admin", term="kingfisher124")) == ["Kingfisher124 Group"]
    assert await find(world, "admin", term="heronfield124") == []
    # the external id was not touched: still found for every record
    assert await found_ids(world, "heron") == sorted(ids)
