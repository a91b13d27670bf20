"""Alembic, one version history per logical service, driven from inside the process.

The histories ship inside the package (`nexus/migrations/`, package data of the wheel):
`env.py` and `script.py.mako` are shared; `<service>/versions/` holds that service's
history; each service's database records its position in `alembic_version_<service>`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from alembic import command, op
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.backend import backend_of, exact_key
from nexus.platform.settings import CoreSettings
from nexus.platform.workqueue.keys import SEPARATOR, family_key

#: The histories this build ships: `nexus/migrations/`, beside `nexus/platform/`.
PACKAGED_MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def migrations_dir() -> Path:
    """`NEXUS_MIGRATIONS_DIR` when set (a developer's or an operator's override), else the
    histories shipped in the package."""
    candidate = CoreSettings().migrations_dir or PACKAGED_MIGRATIONS
    if not (candidate / "env.py").is_file():
        raise FileNotFoundError(f"no alembic env.py in the migrations directory {candidate}")
    return candidate


def version_table(service: LogicalService) -> str:
    return f"alembic_version_{service.value}"


def alembic_config(service: LogicalService) -> Config:
    root = migrations_dir()
    config = Config()
    config.set_main_option("script_location", str(root))
    config.set_main_option("version_locations", str(root / service.value / "versions"))
    config.set_main_option("path_separator", "os")
    config.attributes["version_table"] = version_table(service)
    return config


@lru_cache(maxsize=8)
def head_revisions(service: LogicalService) -> frozenset[str]:
    """The heads of the service's history as shipped with this build (read once)."""
    return frozenset(ScriptDirectory.from_config(alembic_config(service)).get_heads())


@dataclass(frozen=True)
class MigrationState:
    current: frozenset[str]
    heads: frozenset[str]

    @property
    def at_head(self) -> bool:
        return self.current == self.heads

    def describe(self) -> str:
        current = ",".join(sorted(self.current)) or "none"
        return f"at {current}, head {','.join(sorted(self.heads))}"


async def migration_state(engine: AsyncEngine, service: LogicalService) -> MigrationState:
    def _current(conn: Connection) -> frozenset[str]:
        ctx = MigrationContext.configure(conn, opts={"version_table": version_table(service)})
        return frozenset(ctx.get_current_heads())

    async with engine.connect() as conn:
        current = await conn.run_sync(_current)
    return MigrationState(current=current, heads=head_revisions(service))


async def upgrade_to_head(engine: AsyncEngine, service: LogicalService) -> MigrationState:
    """Apply every pending revision of the service's history; idempotent."""
    config = alembic_config(service)

    def _upgrade(conn: Connection) -> None:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")

    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)
    return await migration_state(engine, service)


def new_revision(service: LogicalService, message: str) -> Path:
    """Create an empty revision file in the service's history (for developers)."""
    config = alembic_config(service)
    config.attributes["connection"] = None
    heads = head_revisions(service)
    head_number = max((int(h.rsplit("_", 1)[-1]) for h in heads), default=0)
    rev_id = f"{service.value}_{head_number + 1:04d}"
    script = command.revision(config, message=message, rev_id=rev_id)
    head_revisions.cache_clear()
    if script is None or isinstance(script, list):
        raise RuntimeError("alembic did not create exactly one revision")
    return Path(script.path)


def compare_keys_exactly(columns: list[tuple[str, str, int, bool]]) -> None:
    """Inside a revision: move (table, column, length, nullable) key columns to the binary
    utf8mb4 collation on MySQL/MariaDB (`exact_key`); other backends already compare bytes.
    Values cannot collide: the case-insensitive collation kept them distinct already."""
    if not backend_of(op.get_bind()).keys_need_binary_collation:
        return
    for table, column, length, nullable in columns:
        null = "NULL" if nullable else "NOT NULL"
        op.execute(
            f"ALTER TABLE {table} MODIFY {column} VARCHAR({length}) "
            f"CHARACTER SET utf8mb4 COLLATE utf8mb4_bin {null}"
        )


# ---------------------------------------------------------------------- the work-engine tables


def first_work_tables(metadata: MetaData, prefix: str) -> tuple[Table, ...]:
    """The work-engine tables as their first revisions created them (integration_0003,
    runtime_0006): `workqueue.tables.work_tables` before ADR 0064, which later revisions
    change (`add_lane_waits`). Frozen here so that a new database replays the history."""
    return (
        Table(
            f"{prefix}_item",
            metadata,
            Column("id", String(36), primary_key=True),
            Column("family", String(64), nullable=False),
            Column("queue_class", String(32), nullable=False),
            Column("state", String(16), nullable=False),
            Column("run_after", BigInteger, nullable=False),
            Column("lane_key", exact_key(191)),
            Column("lane_seq", BigInteger),
            Column("target_key", exact_key(191)),
            Column("attempt", Integer, nullable=False, default=0),
            Column("max_attempts", Integer, nullable=False),
            Column("lease_token", String(32)),
            Column("lease_owner", String(64)),
            Column("lease_until", BigInteger),
            Column("claim_epoch", Integer),
            Column("reclaims", Integer, nullable=False, default=0),
            Column("payload", Text, nullable=False),
            Column("failure_class", String(16)),
            Column("last_error", String(300)),
            Column("created_at", BigInteger, nullable=False),
            Column("finished_at", BigInteger),
            Index(f"ix_{prefix}_claim", "family", "queue_class", "state", "run_after", "id"),
        ),
        Table(
            f"{prefix}_source_lane",
            metadata,
            Column("family", String(64), primary_key=True),
            Column("lane_key", exact_key(191), primary_key=True),
            Column("head_seq", BigInteger, nullable=False),
            Column("next_seq", BigInteger, nullable=False),
            Column("halted_by", String(36)),
        ),
        Table(
            f"{prefix}_target_lane",
            metadata,
            Column("family", String(64), primary_key=True),
            Column("target_key", exact_key(191), primary_key=True),
            Column("holder_id", String(36)),
            Column("holder_token", String(32)),
            Column("lease_until", BigInteger),
        ),
        Table(
            f"{prefix}_family",
            metadata,
            Column("family", String(64), primary_key=True),
            Column("owner", String(64), nullable=False),
            Column("ownership_epoch", Integer, nullable=False),
            Column("admitting", Boolean, nullable=False),
            Column("updated_at", BigInteger, nullable=False),
        ),
        Table(
            f"{prefix}_queue",
            metadata,
            Column("family", String(64), primary_key=True),
            Column("queue_class", String(32), primary_key=True),
            Column("weight", Integer, nullable=False, default=1),
            Column("max_attempts", Integer, nullable=False),
            Column("lane_policy", String(16), nullable=False, default="halt"),
            Column("last_enqueued_at", BigInteger, nullable=False),
        ),
    )


def add_lane_waits(prefix: str) -> None:
    """Inside a revision (ADR 0064): blocked items leave the claim range. Target lanes count
    their waiters; items get the source-lane and target-lane indexes (partial on SQLite);
    every pending item behind its lane's head becomes `waiting` (the head's completion
    promotes the next one from now on). Items on held target lanes stay pending: the next
    claim that reads one parks it."""
    op.add_column(
        f"{prefix}_target_lane",
        Column("waiters", Integer, nullable=False, server_default="0"),
    )
    items = f"{prefix}_item"
    op.add_column(items, Column("waiting_on", exact_key(191)))
    op.create_index(
        f"ix_{prefix}_source",
        items,
        ["family", "lane_key", "lane_seq"],
        sqlite_where=text("lane_key IS NOT NULL"),
    )
    op.create_index(
        f"ix_{prefix}_target",
        items,
        ["family", "waiting_on", "run_after", "id"],
        sqlite_where=text("waiting_on IS NOT NULL"),
    )
    op.execute(
        f"UPDATE {items} SET state = 'waiting' WHERE state = 'pending' "  # noqa: S608 - names
        f"AND lane_key IS NOT NULL AND EXISTS (SELECT 1 FROM {prefix}_source_lane l "
        f"WHERE l.family = {items}.family AND l.lane_key = {items}.lane_key "
        f"AND l.head_seq < {items}.lane_seq)"
    )


def drop_lane_waits(prefix: str) -> None:
    """`add_lane_waits` undone: waiting items are pending again (the earlier engine reads
    lane heads and held target lanes in its claim), the indexes and the count go."""
    items = f"{prefix}_item"
    op.execute(
        f"UPDATE {items} SET state = 'pending' "  # noqa: S608 - table names
        "WHERE state IN ('waiting', 'target_wait')"
    )
    op.drop_index(f"ix_{prefix}_target", table_name=items)
    op.drop_index(f"ix_{prefix}_source", table_name=items)
    with op.batch_alter_table(items) as batch:
        batch.drop_column("waiting_on")
    with op.batch_alter_table(f"{prefix}_target_lane") as batch:
        batch.drop_column("waiters")


def scope_work_by_org(prefix: str) -> None:
    """Inside a revision (ADR 0067): every family becomes one installation in one org,
    `<org_id>/<family>`, the org read from each item's payload (`org_id`, which every work
    payload carries); the families table gets its `org_id` column. Lanes and queues follow
    their items: a source lane that held two orgs' items becomes one lane per org (its head
    stays where it was for the org whose item it is; another org's lane starts at its first
    live item, promoted when it was waiting), a target lane keeps its holder in the holder's
    org and counts each org's waiters. Rows no item refers to any more (empty lanes, idle
    families and queues) are dropped: the next enqueue creates them again."""
    bind = op.get_bind()
    items, lanes, targets, families, queues = _work_tables_now(prefix)
    op.add_column(families.name, Column("org_id", String(18)))
    rows: list[_Item] = []  # every item, without its payload (only its org is kept)
    org_of_item: dict[str, str] = {}
    result = bind.execution_options(yield_per=2000).execute(
        select(
            items.c.id,
            items.c.family,
            items.c.state,
            items.c.lane_key,
            items.c.lane_seq,
            items.c.target_key,
            items.c.payload,
        ).where(~items.c.family.contains(SEPARATOR))
    )
    for r in result:
        org_of_item[r.id] = _payload_org(prefix, r.id, r.payload)
        rows.append(_Item(r.id, r.family, r.state, r.lane_key, r.lane_seq, r.target_key))
    by_family: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        by_family.setdefault((row.family, org_of_item[row.id]), []).append(row.id)
    _scope_source_lanes(bind, lanes, items, rows, org_of_item)
    _scope_target_lanes(bind, targets, rows, org_of_item)
    family_rows = {r.family: r for r in bind.execute(select(families))}
    queue_rows = list(bind.execute(select(queues)))
    bind.execute(delete(queues).where(~queues.c.family.contains(SEPARATOR)))
    bind.execute(delete(families).where(~families.c.family.contains(SEPARATOR)))
    for family, org in sorted(by_family):
        new = family_key(org, family)
        old = family_rows.get(family)
        if old is not None:
            bind.execute(
                insert(families).values(
                    family=new,
                    org_id=org,
                    owner=old.owner,
                    ownership_epoch=old.ownership_epoch,
                    admitting=old.admitting,
                    updated_at=old.updated_at,
                )
            )
        for q in queue_rows:
            if q.family == family:
                bind.execute(
                    insert(queues).values(
                        family=new,
                        queue_class=q.queue_class,
                        weight=q.weight,
                        max_attempts=q.max_attempts,
                        lane_policy=q.lane_policy,
                        last_enqueued_at=q.last_enqueued_at,
                    )
                )
    for (family, org), ids in sorted(by_family.items()):
        for start in range(0, len(ids), 500):
            bind.execute(
                update(items)
                .where(items.c.id.in_(ids[start : start + 500]))
                .values(family=family_key(org, family))
            )
    with op.batch_alter_table(families.name) as batch:
        batch.alter_column("org_id", existing_type=String(18), nullable=False)


def unscope_work_by_org(prefix: str) -> None:
    """`scope_work_by_org` undone: families lose their org. Refused when an installation has
    work in two orgs (the earlier key has one family, one lane per key for every org)."""
    bind = op.get_bind()
    items, lanes, targets, families, queues = _work_tables_now(prefix)
    owners: dict[str, str] = {}
    for (family,) in bind.execute(select(families.c.family)):
        org, _, installation = str(family).partition(SEPARATOR)
        if owners.setdefault(installation, org) != org:
            raise RuntimeError(
                f"{prefix}: {installation} has work in more than one org; the earlier "
                "schema cannot hold it (downgrade refused)"
            )
    # the installations' policy rows (`WorkStore.apply_policy`): the earlier engine had none
    bind.execute(delete(queues).where(~queues.c.family.contains(SEPARATOR)))
    for table in (items, lanes, targets, queues, families):
        for (family,) in list(bind.execute(select(table.c.family).distinct())):
            if SEPARATOR in family:
                bind.execute(
                    update(table)
                    .where(table.c.family == family)
                    .values(family=family.partition(SEPARATOR)[2])
                )
    with op.batch_alter_table(families.name) as batch:
        batch.drop_column("org_id")


def _work_tables_now(prefix: str) -> tuple[Table, ...]:
    """The work tables' columns these steps touch, as of ADR 0064 (lane waits)."""
    metadata = MetaData()
    items, lanes, targets, families, queues = first_work_tables(metadata, prefix)
    items.append_column(Column("waiting_on", exact_key(191)))
    targets.append_column(Column("waiters", Integer, nullable=False, server_default="0"))
    families.append_column(Column("org_id", String(18)))
    return items, lanes, targets, families, queues


@dataclass(frozen=True)
class _Item:
    id: str
    family: str
    state: str
    lane_key: str | None
    lane_seq: int | None
    target_key: str | None


def _payload_org(prefix: str, item_id: str, payload: str) -> str:
    try:
        org = json.loads(payload)["org_id"]
    except (ValueError, KeyError, TypeError):
        org = None
    if not isinstance(org, str) or not org or SEPARATOR in org or len(org) > 18:
        raise RuntimeError(
            f"{prefix}_item {item_id}: its payload names no org; the upgrade cannot tell "
            "whose work it is (nothing was changed)"
        )
    return org


def _scope_source_lanes(
    bind: Connection, lanes: Table, items: Table, rows: list[_Item], org_of_item: dict[str, str]
) -> None:
    live = ("pending", "waiting", "target_wait", "processing", "dead", "outcome_unknown")
    on_lane: dict[tuple[str, str], list[_Item]] = {}
    for row in rows:
        if row.lane_key is not None:
            on_lane.setdefault((row.family, row.lane_key), []).append(row)
    old = {(r.family, r.lane_key): r for r in bind.execute(select(lanes))}
    bind.execute(delete(lanes).where(~lanes.c.family.contains(SEPARATOR)))
    for (family, key), members in sorted(on_lane.items()):
        lane = old.get((family, key))
        if lane is None:
            continue
        for org in sorted({org_of_item[m.id] for m in members}):
            mine = sorted(
                (m for m in members if org_of_item[m.id] == org), key=lambda m: m.lane_seq or 0
            )
            at_head = [m for m in mine if m.lane_seq == lane.head_seq]
            ahead = [m for m in mine if (m.lane_seq or 0) > lane.head_seq and m.state in live]
            head = at_head[0] if at_head else (ahead[0] if ahead else None)
            halted = lane.halted_by if at_head and lane.halted_by == at_head[0].id else None
            bind.execute(
                insert(lanes).values(
                    family=family_key(org, family),
                    lane_key=key,
                    head_seq=lane.next_seq if head is None else head.lane_seq,
                    next_seq=lane.next_seq,
                    halted_by=halted,
                )
            )
            if head is not None and head.state == "waiting":  # its org's lane head now
                bind.execute(
                    update(items)
                    .where(items.c.id == head.id, items.c.state == "waiting")
                    .values(state="pending")
                )


def _scope_target_lanes(
    bind: Connection, targets: Table, rows: list[_Item], org_of_item: dict[str, str]
) -> None:
    old = {(r.family, r.target_key): r for r in bind.execute(select(targets))}
    bind.execute(delete(targets).where(~targets.c.family.contains(SEPARATOR)))
    orgs: dict[tuple[str, str], dict[str, int]] = {}  # lane -> org -> waiters
    for row in rows:
        if row.target_key is not None:
            waiting = orgs.setdefault((row.family, row.target_key), {})
            org = org_of_item[row.id]
            waiting[org] = waiting.get(org, 0) + (row.state == "target_wait")
    for (family, key), waiting in sorted(orgs.items()):
        lane = old.get((family, key))
        holder_org = None if lane is None else org_of_item.get(lane.holder_id or "")
        for org, count in sorted(waiting.items()):
            holder = {"holder_id": None, "holder_token": None, "lease_until": None}
            if lane is not None and holder_org == org:
                holder = {
                    "holder_id": lane.holder_id,
                    "holder_token": lane.holder_token,
                    "lease_until": lane.lease_until,
                }
            bind.execute(
                insert(targets).values(
                    family=family_key(org, family), target_key=key, waiters=count, **holder
                )
            )
