"""The schema owner: the only code that runs DDL on record tables.

Each table change is a journaled operation (`runtime_schema_operation`) carrying the desired
table spec and its fingerprint. Executing an operation always observes first: it reflects the
table, records the actual fingerprint, and applies only the missing additive steps (create
table, add nullable column, create index). So an operation interrupted by a crash, a timeout
or an ambiguous driver error is simply executed again: what already happened is observed,
not repeated. A column whose type family differs from the desired one is a conflict: the
operation fails with a clear error and nothing is dropped or altered.
"""

from __future__ import annotations

from dataclasses import dataclass

from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.runtime.schema.spec import (
    ColumnSpec,
    IndexSpec,
    TableSpec,
    reflected_family,
    sa_column,
    sa_table,
)


class SchemaConflict(Exception):
    """The database holds something the desired spec contradicts (never altered)."""


@dataclass(frozen=True)
class Observed:
    exists: bool
    columns: dict[str, str]  # name -> family
    indexes: dict[str, tuple[tuple[str, ...], bool]]

    def fingerprint(self, name: str) -> str:
        if not self.exists:
            return "absent"
        return TableSpec(
            name=name,
            columns=tuple(ColumnSpec(n, family) for n, family in self.columns.items()),
            indexes=tuple(IndexSpec(n, cols, u) for n, (cols, u) in self.indexes.items()),
        ).fingerprint()


def observe(conn: Connection, table: str) -> Observed:
    inspector = inspect(conn)
    if not inspector.has_table(table):
        return Observed(exists=False, columns={}, indexes={})
    columns = {c["name"].lower(): reflected_family(c["type"]) for c in inspector.get_columns(table)}
    indexes = {
        str(i["name"]): (tuple(str(c).lower() for c in i["column_names"]), bool(i["unique"]))
        for i in inspector.get_indexes(table)
        if i["name"]
    }
    for constraint in inspector.get_unique_constraints(table):
        if constraint["name"]:
            columns_of = tuple(str(c).lower() for c in constraint["column_names"])
            indexes[str(constraint["name"])] = (columns_of, True)
    return Observed(exists=True, columns=columns, indexes=indexes)


def _apply(conn: Connection, spec: TableSpec) -> Observed:
    """Bring one table up to `spec` with additive steps only; returns what it then observes."""
    current = observe(conn, spec.name)
    if not current.exists:
        sa_table(spec, MetaData()).create(conn)
        return observe(conn, spec.name)
    ops = Operations(MigrationContext.configure(conn))
    for column in spec.columns:
        family = current.columns.get(column.name)
        if family is None:
            ops.add_column(
                spec.name, sa_column(ColumnSpec(column.name, column.type, nullable=True))
            )
        elif family != column.family:
            raise SchemaConflict(
                f"{spec.name}.{column.name} is {family} in the database, {column.family} in "
                "the metadata: type changes are not supported"
            )
    for index in spec.indexes:
        if index.name not in current.indexes:
            ops.create_index(index.name, spec.name, list(index.columns), unique=index.unique)
    return observe(conn, spec.name)


async def reconcile_table(engine: AsyncEngine, spec: TableSpec) -> tuple[str, str]:
    """Observe, then apply what is missing. Returns (actual fingerprint before, after)."""
    async with engine.begin() as conn:
        before = await conn.run_sync(lambda c: observe(c, spec.name))
        after = await conn.run_sync(lambda c: _apply(c, spec))
    return before.fingerprint(spec.name), after.fingerprint(spec.name)
