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
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.backend import backend_of
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
