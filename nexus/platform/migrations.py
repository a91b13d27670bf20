"""Alembic, one version history per logical service, driven from inside the process.

The histories ship inside the package (`nexus/migrations/`, package data of the wheel):
`env.py` and `script.py.mako` are shared; `<service>/versions/` holds that service's
history; each service's database records its position in `alembic_version_<service>`.
"""

from __future__ import annotations

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
    text,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.backend import backend_of, exact_key
from nexus.platform.settings import CoreSettings

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
