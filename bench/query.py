#!/usr/bin/env python
"""SOQL list-view latency vs a hand-written SQLAlchemy Core query (same rows, same run).

    .venv/bin/python bench/query.py [--contacts 100000] [--runs 200] [--backend sqlite|mariadb]

Seeds 10,000 Accounts and N Contacts (Core bulk inserts), then runs a 200-row list view with
2 parent paths and a filter through `run_query` (permissions injected: a Private object seen
through role-hierarchy ownership) and the equivalent Core query, alternating, and reports
p50/p99 and the ratio of medians. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import and_, insert, select

from nexus.contracts.identity import TrustedCall
from nexus.contracts.roles import LogicalService
from nexus.identity import models as im
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.ids import new_id
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.runtime.access.service import AccessCache, assign_permission_set
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.query.engine import query_current

NAME = {"api_name": "Name", "label": "Name", "type": "text", "length": 80}
METADATA = {
    "objects": [
        {
            "api_name": "Acct__c",
            "label": "Account",
            "plural_label": "Accounts",
            "key_prefix": "a0A",
            "sharing_model": "Private",
            "name_field": NAME,
            "fields": [],
        },
        {
            "api_name": "Cont__c",
            "label": "Contact",
            "plural_label": "Contacts",
            "key_prefix": "a0C",
            "sharing_model": "Private",
            "name_field": NAME,
            "fields": [
                {"api_name": "Email__c", "label": "Email", "type": "email"},
                {
                    "api_name": "Status__c",
                    "label": "Status",
                    "type": "picklist",
                    "values": [{"value": "Open"}, {"value": "Closed"}],
                },
                {
                    "api_name": "Acct__c",
                    "label": "Account",
                    "type": "lookup",
                    "reference_to": "Acct__c",
                    "relationship_name": "Acct__r",
                    "child_relationship_name": "Conts__r",
                },
            ],
        },
    ],
    "permission_sets": [
        {
            "api_name": "Reader",
            "label": "Reader",
            "objects": [
                {"object": "Acct__c", "read": True, "all_fields": "read"},
                {"object": "Cont__c", "read": True, "all_fields": "read"},
            ],
        }
    ],
}
SOQL = (
    "SELECT Name, Email__c, Acct__r.Name, Acct__r.Owner.Name FROM Cont__c "
    "WHERE Status__c = 'Open' ORDER BY Name LIMIT 200"
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(url: str, contacts: int, runs: int) -> dict[str, Any]:
    engine = create_engine(url, application_name="bench")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        org_id = await identity.create_org(repo, name="Bench")
        await identity.create_role(repo, org_id=org_id, name="Boss")
        await identity.create_role(repo, org_id=org_id, name="Rep", parent="Boss")
        boss = await identity.create_user(
            repo, org_id=org_id, username="boss@b.test", password=None, role_name="Boss"
        )
        reps = [
            await identity.create_user(
                repo, org_id=org_id, username=f"rep{i}@b.test", password=None, role_name="Rep"
            )
            for i in range(5)
        ]
        outsider = await identity.create_user(
            repo, org_id=org_id, username="out@b.test", password=None
        )
    await apply_metadata(engine, org_id=org_id, raw=METADATA)
    async with unit_of_work(sessions) as session:
        await assign_permission_set(session, org_id=org_id, user_id=boss, permission_set="Reader")
        epoch = int((await IdentityRepository(session).org(org_id))["security_epoch"])
    metadata, access_cache = MetadataCache(), AccessCache()
    async with unit_of_work(sessions, readonly=True) as session:
        view = await metadata.view(session, org_id)
    accounts, contacts_table = (
        view.table(view.objects["acct__c"]),
        view.table(view.objects["cont__c"]),
    )
    now = datetime(2026, 11, 29)
    owners = [*reps, outsider]  # the outsider's rows must be filtered out

    def system(owner: str) -> dict[str, Any]:
        return {
            "org_id": org_id,
            "owner_id": owner,
            "created_by_id": owner,
            "created_date": now,
            "last_modified_by_id": owner,
            "last_modified_date": now,
            "system_modstamp": now,
            "is_deleted": False,
            "row_version": 1,
        }

    account_ids = []
    rows = []
    for i in range(10_000):
        account_id = new_id("a0A")
        account_ids.append(account_id)
        rows.append(
            {**system(owners[i % len(owners)]), "id": account_id, "name": f"Account {i:05d}"}
        )
    async with unit_of_work(sessions) as session:
        for start in range(0, len(rows), 2000):
            await session.execute(insert(accounts), rows[start : start + 2000])
    for start in range(0, contacts, 5000):
        batch = []
        for i in range(start, min(contacts, start + 5000)):
            batch.append(
                {
                    **system(owners[i % len(owners)]),
                    "id": new_id("a0C"),
                    "name": f"Contact {i:06d}",
                    "email__c": f"c{i}@b.test",
                    "status__c": "Open" if i % 3 else "Closed",
                    "acct__c": account_ids[i % len(account_ids)],
                }
            )
        async with unit_of_work(sessions) as session:
            await session.execute(insert(contacts_table), batch)

    caller = TrustedCall(
        org_id=org_id,
        user_id=boss,
        session_id="0Ak000000000000AAA",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=epoch,
        via="delegation",
    )
    parent, owner_user = accounts.alias("p"), im.user.alias("o")
    visible = [boss, *reps]
    core = (
        select(
            contacts_table.c.id,
            contacts_table.c.name,
            contacts_table.c.email__c,
            parent.c.name,
            owner_user.c.display_name,
        )
        .select_from(
            contacts_table.outerjoin(
                parent,
                and_(
                    parent.c.id == contacts_table.c.acct__c,
                    parent.c.org_id == org_id,
                    parent.c.is_deleted.is_(False),
                    parent.c.owner_id.in_(visible),
                ),
            ).outerjoin(
                owner_user,
                and_(
                    owner_user.c.org_id == parent.c.org_id,
                    owner_user.c.user_id == parent.c.owner_id,
                ),
            )
        )
        .where(
            contacts_table.c.org_id == org_id,
            contacts_table.c.is_deleted.is_(False),
            contacts_table.c.owner_id.in_(visible),
            contacts_table.c.status__c == "Open",
        )
        .order_by(contacts_table.c.name, contacts_table.c.id)
        .limit(200)
    )
    ours, theirs = [], []
    for i in range(runs + 10):
        started = time.perf_counter()
        async with unit_of_work(sessions, readonly=True) as session:
            access = await access_cache.for_caller(session, caller)
            page = await query_current(session, cache=metadata, access=access, soql=SOQL)
        elapsed_ours = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        async with unit_of_work(sessions, readonly=True) as session:
            core_rows = (await session.execute(core)).all()
        elapsed_core = (time.perf_counter() - started) * 1000
        if i >= 10:  # warm-up excluded
            ours.append(elapsed_ours)
            theirs.append(elapsed_core)
    assert [r["Id"] for r in page.records] == [r[0] for r in core_rows], "different rows"
    assert len(page.records) == 200
    await engine.dispose()
    return {
        "contacts": contacts,
        "soql_p50_ms": round(statistics.median(ours), 2),
        "soql_p99_ms": round(pct(ours, 0.99), 2),
        "core_p50_ms": round(statistics.median(theirs), 2),
        "core_p99_ms": round(pct(theirs, 0.99), 2),
        "ratio_p50": round(statistics.median(ours) / statistics.median(theirs), 2),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": f"{os.uname().nodename} {os.cpu_count()} cpu, {sys.version.split()[0]}",
        "query": SOQL,
    }
    if args.backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="nexus-bench-query-")
        out["sqlite"] = await run(
            f"sqlite+aiosqlite:///{folder}/runtime.sqlite3", args.contacts, args.runs
        )
    else:
        from tests.support.mariadb import find_server_binary, start_mariadb

        binary = find_server_binary()
        if binary is None:
            out["mariadb"] = "skipped: mariadbd not found"
            return out
        server = start_mariadb(binary)
        try:
            out["mariadb"] = await run(
                server.create_database("bench_query"), args.contacts, args.runs
            )
        finally:
            server.stop()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--contacts", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--backend", choices=["sqlite", "mariadb"], default="sqlite")
    configure_logging(role="bench", level="warning", fmt="json")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
