"""`nexus metadata apply|resume|reindex` and `nexus query` (SOQL as a named user)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexus.cli.common import (
    EXIT_FAILURE,
    CliError,
    Parser,
    Subparsers,
    first_org_id,
    safe_reason,
    service_engine,
)
from nexus.contracts.roles import LogicalService
from nexus.platform.settings import load_settings

if TYPE_CHECKING:
    pass


def cmd_metadata_apply(args: argparse.Namespace) -> int:
    import yaml

    from nexus.contracts.errors import NexusError
    from nexus.platform.observability import configure_logging
    from nexus.runtime.metadata.definitions import InvalidMetadata
    from nexus.runtime.metadata.service import apply_metadata

    settings = load_settings()
    configure_logging(role="metadata", level="warning", fmt=settings.log.log_format)
    try:
        raw = yaml.safe_load(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(
            f"cannot read {args.file}: {type(exc).__name__}: {safe_reason(exc)}"
        ) from None

    async def run() -> Any:
        async with service_engine(settings, LogicalService.RUNTIME, "nexus-metadata") as engine:
            org_id = args.org_id or await first_org_id(engine)
            return await apply_metadata(
                engine, org_id=org_id, raw=raw, failpoint=settings.core.failpoint
            )

    try:
        result = asyncio.run(run())
    except InvalidMetadata as exc:
        for problem in exc.problems:
            print(f"{args.file}: {problem.path}: {problem.message}", file=sys.stderr)
        raise CliError(
            f"{len(exc.problems)} problem(s); nothing was applied", EXIT_FAILURE
        ) from None
    except NexusError as exc:
        raise CliError(exc.message, EXIT_FAILURE) from None
    for version in result.versions:
        print(f"{version['kind']} {version['name']}: version {version['version']}")
    for name in result.unchanged:
        print(f"object {name}: unchanged")
    print(f"schema generation {result.schema_generation}", end=", ")
    print(f"metadata revision {result.metadata_revision}")
    return 0


def cmd_metadata_resume(args: argparse.Namespace) -> int:
    from nexus.runtime.metadata.service import resume_staged

    settings = load_settings()

    async def run() -> list[str]:
        async with service_engine(settings, LogicalService.RUNTIME, "nexus-metadata") as engine:
            return await resume_staged(engine)

    done = asyncio.run(run())
    print(f"completed {len(done)} staged metadata apply(s)")
    return 0


def cmd_metadata_reindex(args: argparse.Namespace) -> int:
    """Rebuild the search index from the record tables, one object per transaction."""
    from nexus.platform.db.engine import session_factory, unit_of_work
    from nexus.runtime.metadata.view import MetadataCache
    from nexus.runtime.search.index import rebuild_index

    settings = load_settings()

    async def run() -> dict[str, int]:
        async with service_engine(settings, LogicalService.RUNTIME, "nexus-metadata") as engine:
            org_id = args.org_id or await first_org_id(engine)
            sessions = session_factory(engine)
            cache = MetadataCache()
            async with unit_of_work(sessions, readonly=True) as session:
                view = await cache.view(session, org_id)
            names = args.object or sorted(o.api_name for o in view.objects.values())
            unknown = [n for n in names if view.object(n) is None]
            if unknown:
                raise CliError(f"no such object: {', '.join(unknown)}", EXIT_FAILURE)
            counts: dict[str, int] = {}
            for name in names:
                async with unit_of_work(sessions) as session:
                    view = await cache.view(session, org_id)
                    counts |= await rebuild_index(session, view=view, objects=[name])
            return counts

    counts = asyncio.run(run())
    for name, count in counts.items():
        print(f"{name}: {count} record(s) indexed")
    print(f"search index rebuilt for {len(counts)} object(s)")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    """Run SOQL as a named user (that user's permissions and sharing apply) and print JSON."""
    from nexus.contracts.errors import NexusError
    from nexus.identity.api import Directory, UnknownUser
    from nexus.platform.db.engine import session_factory, unit_of_work
    from nexus.runtime.access.service import load_access
    from nexus.runtime.metadata.view import MetadataCache
    from nexus.runtime.query.engine import query_current

    settings = load_settings()

    async def run() -> dict[str, Any]:
        async with (
            service_engine(settings, LogicalService.RUNTIME, "nexus-query") as engine,
            unit_of_work(session_factory(engine), readonly=True) as session,
        ):
            user = await Directory(session).user_by_username(args.username)
            if user is None or not user["is_active"]:
                raise UnknownUser(f"no active user {args.username!r}")
            access = await load_access(session, user["org_id"], user["user_id"])
            page = await query_current(
                session,
                cache=MetadataCache(),
                access=access,
                soql=args.soql,
                include_deleted=False,
                page_size=args.limit,
                start=0,
            )
        return {"totalSize": page.total_size, "done": page.done, "records": page.records}

    try:
        result = asyncio.run(run())
    except NexusError as exc:
        raise CliError(f"{exc.code}: {exc.message}", EXIT_FAILURE) from None
    print(json.dumps(result, indent=2, sort_keys=True, default=str))
    return 0


def add_parsers(sub: Subparsers) -> None:
    meta = sub.add_parser("metadata", help="apply metadata (objects and fields)")
    meta_sub = meta.add_subparsers(dest="metadata_command", required=True, parser_class=Parser)
    apply = meta_sub.add_parser("apply", help="apply a YAML batch atomically")
    apply.add_argument("file")
    apply.add_argument("--org-id", help="default: the deployment's org")
    apply.set_defaults(handler=cmd_metadata_apply)
    resume = meta_sub.add_parser("resume", help="complete applies interrupted by a crash")
    resume.set_defaults(handler=cmd_metadata_resume)
    reindex = meta_sub.add_parser("reindex", help="rebuild the global search index")
    reindex.add_argument("--object", action="append", help="only this object (repeatable)")
    reindex.add_argument("--org-id", help="default: the deployment's org")
    reindex.set_defaults(handler=cmd_metadata_reindex)
    query = sub.add_parser("query", help="run SOQL as a user (operators: look at records)")
    query.add_argument("soql")
    query.add_argument("--username", required=True, help="whose permissions apply")
    query.add_argument("--limit", type=int, default=200, help="rows (default 200)")
    query.set_defaults(handler=cmd_query)
