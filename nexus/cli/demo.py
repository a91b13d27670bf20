"""`nexus demo load`: sample records through Runtime's record operations."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from nexus.cli.common import (
    EXIT_FAILURE,
    CliError,
    Parser,
    Subparsers,
    service_engine,
)
from nexus.contracts.roles import LogicalService
from nexus.platform.settings import load_settings

if TYPE_CHECKING:
    pass


async def _demo_batch(
    session: Any, *, view: Any, access: Any, caller: Any, object_name: str, items: list[Any]
) -> tuple[list[str], int]:
    """Create the sample records a load has not created yet (found by their external id);
    the id of every item, and how many were created."""
    import re

    from nexus.apps.sfcrm.demo import DEMO_KEY
    from nexus.contracts.records import MutateRequest
    from nexus.runtime.query.engine import run_query
    from nexus.runtime.records.mutate import mutate

    keys = [str(item.fields[DEMO_KEY]) for item in items]
    if not all(re.fullmatch(r"[a-z0-9-]+", k) for k in keys):  # nothing to quote in SOQL
        raise CliError("sample data keys are demo-<object>-<n>", EXIT_FAILURE)
    listed = ", ".join(f"'{k}'" for k in keys)
    soql = f"SELECT Id, {DEMO_KEY} FROM {object_name} WHERE {DEMO_KEY} IN ({listed})"  # noqa: S608 - SOQL of checked keys
    page = await run_query(session, view=view, access=access, soql=soql, page_size=len(keys))
    known = {str(r[DEMO_KEY]): str(r["Id"]) for r in page.records}
    found = [known.get(k) for k in keys]
    missing = [item for item, there in zip(items, found, strict=True) if not there]
    if not missing:
        return [str(k) for k in found], 0
    request = MutateRequest(items=missing, all_or_none=True)
    result = await mutate(session, view=view, access=access, caller=caller, request=request)
    failed = [r for r in result.results if not r.success]
    if failed:
        errors = failed[0].errors[0] if failed[0].errors else None
        detail = f"{errors.category}: {errors.message}" if errors else "refused"
        raise CliError(f"{object_name}: {detail}", EXIT_FAILURE)
    created = iter(str(r.id) for r in result.results)
    return [k or next(created) for k in found], len(missing)


def cmd_demo_load(args: argparse.Namespace) -> int:
    """Sample records through Runtime's record operations, as a named user (permissions,
    validation rules and flows apply as for any caller)."""
    from nexus.apps.sfcrm.demo import demo_batches
    from nexus.contracts.errors import NexusError
    from nexus.contracts.identity import TrustedCall
    from nexus.identity.api import Directory
    from nexus.platform.db.engine import session_factory, unit_of_work
    from nexus.runtime.access.service import load_access
    from nexus.runtime.metadata.view import MetadataCache

    settings = load_settings()

    async def run() -> dict[str, list[int]]:
        counts: dict[str, list[int]] = {}  # object -> [created, already there]
        cache = MetadataCache()
        async with service_engine(settings, LogicalService.RUNTIME, "nexus-demo") as engine:
            sessions = session_factory(engine)
            async with unit_of_work(sessions, readonly=True) as session:
                user = await Directory(session).user_by_username(args.username)
                if user is None or not user["is_active"]:
                    raise CliError(f"no active user {args.username!r}", EXIT_FAILURE)
                org = await Directory(session).org(user["org_id"])
            caller = TrustedCall(
                org_id=user["org_id"],
                user_id=user["user_id"],
                session_id="",
                client_id=None,
                scopes=frozenset({"full"}),
                security_epoch=int(org["security_epoch"]) if org else 0,
                via="delegation",
                workload="cli",
            )
            ids: dict[str, list[str]] = {}
            for object_name, build in demo_batches(args.accounts, seed=args.seed):
                async with unit_of_work(sessions) as session:
                    view = await cache.view(session, caller.org_id)
                    if view.object(object_name) is None:
                        raise CliError(
                            f"no object {object_name}: install sfcrm first", EXIT_FAILURE
                        )
                    access = await load_access(session, caller.org_id, caller.user_id)
                    items = build(ids)
                    batch_ids, created = await _demo_batch(
                        session,
                        view=view,
                        access=access,
                        caller=caller,
                        object_name=object_name,
                        items=items,
                    )
                ids.setdefault(object_name, []).extend(batch_ids)
                count = counts.setdefault(object_name, [0, 0])
                count[0] += created
                count[1] += len(items) - created
        return counts

    try:
        counts = asyncio.run(run())
    except NexusError as exc:
        raise CliError(f"{exc.code}: {exc.message}", EXIT_FAILURE) from None
    for name, (created, existing) in counts.items():
        there = f", {existing} already there" if existing else ""
        print(f"{name}: {created} record(s) created{there}")
    return 0


def add_parsers(sub: Subparsers) -> None:
    demo = sub.add_parser("demo", help="sample data")
    dsub = demo.add_subparsers(dest="demo_command", required=True, parser_class=Parser)
    load = dsub.add_parser("load", help="create sample Accounts, Contacts, Opportunities")
    load.add_argument("--username", default="admin", help="whose records (default admin)")
    load.add_argument("--accounts", type=int, default=200, help="how many (default 200)")
    load.add_argument("--seed", type=int, default=7)
    load.set_defaults(handler=cmd_demo_load)
