#!/usr/bin/env python
"""Records throughput through the Runtime use cases vs plain SQLAlchemy Core, same DB, same run.

    .venv/bin/python bench/records.py [--records 10000] [--backend sqlite|mariadb|both]
                                      [--object bench|contact]

For each backend: a fresh database (MariaDB: a throwaway mariadbd started like the tests do),
one object, a user with a permission set. `--object bench` (the default): a custom object with
6 fields; `--object contact`: the sfcrm package's Account and Contact as the package defines
them (its before-save name flow included), Contacts with the six columns bench/bulk.py loads.
Measures
  * create: N records through `mutate` in batches of 200 vs Core `insert(table)` executemany
    of the same rows in batches of 200 (one transaction per batch for both);
  * read: N records by id through `read_selected` (one use case each) vs Core select-by-id
    (one transaction each);
  * describe: describe_global + describe_object, 1000 times.
Prints one JSON document with records/s and the ratios (Runtime time / Core time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml
from sqlalchemy import insert, select

from nexus.apps import sfcrm
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import MutateItem, MutateRequest
from nexus.contracts.roles import LogicalService
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.ids import new_id
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.runtime.access.service import AccessCache, assign_permission_set
from nexus.runtime.describe import describe_global, describe_object
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.records.mutate import mutate
from nexus.runtime.records.read import read_selected

BATCH = 200
OBJECT = {
    "api_name": "Bench__c",
    "label": "Bench",
    "plural_label": "Benches",
    "key_prefix": "a0B",
    "sharing_model": "ReadWrite",
    "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
    "fields": [
        {"api_name": "Email__c", "label": "Email", "type": "email"},
        {"api_name": "Amount__c", "label": "Amount", "type": "currency"},
        {
            "api_name": "Stage__c",
            "label": "Stage",
            "type": "picklist",
            "values": [{"value": "New"}, {"value": "Won"}],
        },
        {"api_name": "Closed__c", "label": "Closed", "type": "date"},
        {"api_name": "Flag__c", "label": "Flag", "type": "checkbox"},
        {"api_name": "Notes__c", "label": "Notes", "type": "textarea"},
    ],
}
ACCESS = {
    "api_name": "Bench_Access",
    "label": "Bench",
    "objects": [
        {"object": "Bench__c", "create": True, "read": True, "edit": True, "all_fields": "edit"}
    ],
}


def fields(i: int) -> dict[str, Any]:
    return {
        "Name": f"Record {i}",
        "Email__c": f"r{i}@bench.test",
        "Amount__c": i % 1000 + 0.5,
        "Stage__c": "New",
        "Closed__c": "2026-11-29",
        "Flag__c": i % 2 == 0,
        "Notes__c": "x" * 40,
    }


def columns(i: int) -> dict[str, Any]:
    """What `fields(i)` stores, for the Core insert."""
    return {
        "name": f"Record {i}",
        "email__c": f"r{i}@bench.test",
        "amount__c": Decimal(i % 1000) + Decimal("0.5"),
        "stage__c": "New",
        "closed__c": date(2026, 11, 29),
        "flag__c": i % 2 == 0,
        "notes__c": "x" * 40,
    }


def contact_fields(i: int) -> dict[str, Any]:
    """A Contact as bench/bulk.py's CSV row has it."""
    return {
        "FirstName": f"First{i}",
        "LastName": f"Direct {i:06d}",
        "Name": f"First{i} Direct",
        "Email": f"c{i}@bench.test",
        "Title": "Buyer",
        "Phone": f"+1 555 {i % 10000:04d}",
    }


def contact_columns(i: int) -> dict[str, Any]:
    """What `contact_fields(i)` stores (the name flow sets Name from the parts)."""
    return {
        "firstname": f"First{i}",
        "lastname": f"Direct {i:06d}",
        "name": f"First{i} Direct {i:06d}",
        "email": f"c{i}@bench.test",
        "title": "Buyer",
        "phone": f"+1 555 {i % 10000:04d}",
    }


def contact_metadata() -> dict[str, Any]:
    """The sfcrm package's Account and Contact, its Contact name flow, and access to both."""
    components = Path(sfcrm.__file__).parent / "package" / "components"
    package = yaml.safe_load((components / "objects.yaml").read_text())["components"]
    logic = yaml.safe_load((components / "logic.yaml").read_text())["components"]
    objects = {c["key"]: c["definition"] for c in package if c["kind"] == "object"}
    flows = [c["definition"] for c in logic if c["kind"] == "flow"]
    return {
        "objects": [objects["Account"], objects["Contact"]],
        "flows": [f for f in flows if f["object"] == "Contact"],
        "permission_sets": [
            {
                "api_name": "Bench_Access",
                "label": "Bench",
                "objects": [
                    {
                        "object": name,
                        "create": True,
                        "read": True,
                        "edit": True,
                        "all_fields": "edit",
                    }
                    for name in ("Account", "Contact")
                ],
            }
        ],
    }


@dataclass(frozen=True)
class Shape:
    """One measured object: its metadata, api name, and record i as fields and as columns."""

    metadata: Any
    api_name: str
    key_prefix: str
    fields: Any
    columns: Any


SHAPES = {
    "bench": Shape(
        lambda: {"objects": [OBJECT], "permission_sets": [ACCESS]},
        "Bench__c",
        "a0B",
        fields,
        columns,
    ),
    "contact": Shape(contact_metadata, "Contact", "003", contact_fields, contact_columns),
}


async def run(url: str, n: int, shape: Shape) -> dict[str, Any]:
    engine = create_engine(url, application_name="bench")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        org_id = await identity.create_org(repo, name="Bench")
        user_id = await identity.create_user(
            repo, org_id=org_id, username="bench@bench.test", password=None
        )
    await apply_metadata(engine, org_id=org_id, raw=shape.metadata())
    async with unit_of_work(sessions) as session:
        await assign_permission_set(
            session, org_id=org_id, user_id=user_id, permission_set="Bench_Access"
        )
        epoch = int((await IdentityRepository(session).org(org_id))["security_epoch"])
    caller = TrustedCall(
        org_id=org_id,
        user_id=user_id,
        session_id="0Ak000000000000AAA",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=epoch,
        via="delegation",
    )
    metadata, access_cache = MetadataCache(), AccessCache()

    started = time.perf_counter()
    ids: list[str] = []
    for start in range(0, n, BATCH):
        items = [
            MutateItem(op="create", object=shape.api_name, fields=shape.fields(i))
            for i in range(start, min(n, start + BATCH))
        ]
        async with unit_of_work(sessions) as session:
            view = await metadata.view(session, org_id)
            access = await access_cache.for_caller(session, caller)
            result = await mutate(
                session, view=view, access=access, caller=caller, request=MutateRequest(items=items)
            )
        ids += [r.id or "" for r in result.results]
    runtime_create = time.perf_counter() - started

    async with unit_of_work(sessions, readonly=True) as session:
        view = await metadata.view(session, org_id)
    table = view.table(view.objects[shape.api_name.lower()])
    now = datetime.utcnow()
    started = time.perf_counter()
    core_ids: list[str] = []
    for start in range(0, n, BATCH):
        rows = []
        for i in range(start, min(n, start + BATCH)):
            record_id = new_id(shape.key_prefix)
            core_ids.append(record_id)
            rows.append(
                {
                    "org_id": org_id,
                    "id": record_id,
                    "owner_id": user_id,
                    "created_by_id": user_id,
                    "created_date": now,
                    "last_modified_by_id": user_id,
                    "last_modified_date": now,
                    "system_modstamp": now,
                    "is_deleted": False,
                    "row_version": 1,
                    **shape.columns(i),
                }
            )
        async with unit_of_work(sessions) as session:
            await session.execute(insert(table), rows)
    core_create = time.perf_counter() - started

    started = time.perf_counter()
    for record_id in ids:
        async with unit_of_work(sessions, readonly=True) as session:
            view = await metadata.view(session, org_id)
            access = await access_cache.for_caller(session, caller)
            await read_selected(
                session, view=view, access=access, object_name=None, record_id=record_id
            )
    runtime_read = time.perf_counter() - started

    started = time.perf_counter()
    for record_id in core_ids:
        async with unit_of_work(sessions, readonly=True) as session:
            (
                await session.execute(
                    select(table).where(table.c.org_id == org_id, table.c.id == record_id)
                )
            ).mappings().first()
    core_read = time.perf_counter() - started

    started = time.perf_counter()
    for _ in range(1000):
        async with unit_of_work(sessions, readonly=True) as session:
            view = await metadata.view(session, org_id)
            access = await access_cache.for_caller(session, caller)
        describe_global(view, access)
        describe_object(view, access, shape.api_name)
    describe_time = time.perf_counter() - started
    await engine.dispose()
    return {
        "create_records_per_s": round(n / runtime_create),
        "core_insert_records_per_s": round(n / core_create),
        "create_ratio": round(runtime_create / core_create, 2),
        "read_records_per_s": round(n / runtime_read),
        "core_read_records_per_s": round(n / core_read),
        "read_ratio": round(runtime_read / core_read, 2),
        "describe_per_s": round(1000 / describe_time),
    }


async def main(n: int, backends: list[str], shape: str = "bench") -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": f"{os.uname().nodename} {os.cpu_count()} cpu, Python {sys.version.split()[0]}",
        "records": n,
        "object": SHAPES[shape].api_name,
    }
    for backend in backends:
        if backend == "sqlite":
            folder = tempfile.mkdtemp(prefix="nexus-bench-records-")
            out["sqlite"] = await run(
                f"sqlite+aiosqlite:///{folder}/runtime.sqlite3", n, SHAPES[shape]
            )
        else:
            from tests.support.mariadb import find_server_binary, start_mariadb

            binary = find_server_binary()
            if binary is None:
                out["mariadb"] = "skipped: mariadbd not found"
                continue
            server = start_mariadb(binary)
            try:
                out["mariadb"] = await run(
                    server.create_database("bench_records"), n, SHAPES[shape]
                )
            finally:
                server.stop()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--backend", choices=["sqlite", "mariadb", "both"], default="both")
    parser.add_argument("--object", choices=sorted(SHAPES), default="bench")
    args = parser.parse_args()
    configure_logging(role="bench", level="warning", fmt="json")
    chosen = ["sqlite", "mariadb"] if args.backend == "both" else [args.backend]
    print(json.dumps(asyncio.run(main(args.records, chosen, args.object)), indent=2))
