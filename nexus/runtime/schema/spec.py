"""Desired physical shape of an object's record table, its fingerprint, and SQLAlchemy types.

Types are compared by family (`string`, `numeric`, ...) so that what a database reflects
(`TINYINT(1)`, `DECIMAL(18,2)`, `VARCHAR(80)`) matches what was asked for on every backend.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeEngine

from nexus.runtime.metadata.definitions import FieldDef, ObjectDef

TABLE_PREFIX = "rt_"


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: str  # "string:80", "numeric:18:2", "text", "bool", "date", "datetime", "int", "bigint"
    nullable: bool = True

    @property
    def family(self) -> str:
        return self.type.split(":", 1)[0]


@dataclass(frozen=True)
class IndexSpec:
    name: str
    columns: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[ColumnSpec, ...]
    indexes: tuple[IndexSpec, ...]
    primary_key: tuple[str, ...] = ("org_id", "id")

    def fingerprint(self) -> str:
        """Digest of what a reconciled database must show: column families and indexes."""
        canonical = {
            "table": self.name,
            "columns": sorted((c.name, c.family) for c in self.columns),
            "indexes": sorted((i.name, list(i.columns), i.unique) for i in self.indexes),
        }
        return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "columns": [[c.name, c.type, c.nullable] for c in self.columns],
                "indexes": [[i.name, list(i.columns), i.unique] for i in self.indexes],
            }
        )

    @classmethod
    def from_json(cls, raw: str) -> TableSpec:
        data = json.loads(raw)
        return cls(
            name=data["name"],
            columns=tuple(ColumnSpec(n, t, bool(nullable)) for n, t, nullable in data["columns"]),
            indexes=tuple(IndexSpec(n, tuple(cols), bool(u)) for n, cols, u in data["indexes"]),
        )


SYSTEM_COLUMNS = (
    ColumnSpec("org_id", "string:18", nullable=False),
    ColumnSpec("id", "string:18", nullable=False),
    ColumnSpec("owner_id", "string:18", nullable=False),
    ColumnSpec("created_by_id", "string:18", nullable=False),
    ColumnSpec("created_date", "datetime", nullable=False),
    ColumnSpec("last_modified_by_id", "string:18", nullable=False),
    ColumnSpec("last_modified_date", "datetime", nullable=False),
    ColumnSpec("system_modstamp", "datetime", nullable=False),
    ColumnSpec("is_deleted", "bool", nullable=False),
    ColumnSpec("row_version", "bigint", nullable=False),
)


def table_name(object_api_name: str) -> str:
    return TABLE_PREFIX + object_api_name.lower()


def column_name(field_api_name: str) -> str:
    return field_api_name.lower()


def _index_name(kind: str, table: str, column: str) -> str:
    digest = hashlib.sha256(f"{table}.{column}".encode()).hexdigest()[:8]
    return f"{kind}_{table[:24]}_{column[:20]}_{digest}"


def column_type(field: FieldDef) -> str:
    t = field.type
    if t in ("number", "currency", "percent"):
        precision, scale = field.effective_precision
        return f"numeric:{precision}:{scale}"
    return {
        "text": f"string:{field.length}",
        "textarea": "string:255",
        "long_text": "text",
        "email": "string:80",
        "phone": "string:40",
        "url": "string:255",
        "checkbox": "bool",
        "date": "date",
        "datetime": "datetime",
        "picklist": "string:255",
        "multi_picklist": "text",
        "lookup": "string:18",
        "master_detail": "string:18",
        "auto_number": "string:40",
    }[t]


def desired_table(obj: ObjectDef) -> TableSpec:
    name = table_name(obj.api_name)
    columns = list(SYSTEM_COLUMNS)
    indexes = [
        IndexSpec(_index_name("ix", name, "owner_id"), ("org_id", "owner_id")),
        IndexSpec(_index_name("ix", name, "name"), ("org_id", "name")),  # list views sort by it
    ]
    for field in obj.all_fields():
        if field.type == "formula":
            continue  # computed on read: no column
        col = column_name(field.api_name)
        columns.append(ColumnSpec(col, column_type(field)))
        if field.type in ("lookup", "master_detail"):
            indexes.append(IndexSpec(_index_name("ix", name, col), ("org_id", col)))
        if field.unique or field.external_id:
            indexes.append(IndexSpec(_index_name("uq", name, col), ("org_id", col), unique=True))
    return TableSpec(name=name, columns=tuple(columns), indexes=tuple(indexes))


def sa_type(spec_type: str) -> TypeEngine[Any]:
    family, *args = spec_type.split(":")
    if family == "string":
        return String(int(args[0]))
    if family == "numeric":
        return Numeric(int(args[0]), int(args[1]), asdecimal=True)
    simple: dict[str, TypeEngine[Any]] = {
        "text": Text(),
        "bool": Boolean(),
        "date": Date(),
        # milliseconds on MySQL/MariaDB too (plain DATETIME keeps whole seconds: two changes
        # within a second looked simultaneous to clients syncing by SystemModstamp)
        "datetime": DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql"),
        "int": Integer(),
        "bigint": BigInteger(),
    }
    return simple[family]


def sa_column(column: ColumnSpec, *, primary_key: bool = False) -> Column[Any]:
    return Column(
        column.name, sa_type(column.type), nullable=column.nullable, primary_key=primary_key
    )


def sa_table(spec: TableSpec, metadata: MetaData | None = None) -> Table:
    """A SQLAlchemy Table for DDL and DML on this record table."""
    table = Table(
        spec.name,
        metadata or MetaData(),
        *(sa_column(c, primary_key=c.name in spec.primary_key) for c in spec.columns),
    )
    for index in spec.indexes:
        Index(index.name, *(table.c[c] for c in index.columns), unique=index.unique)
    return table


#: Reflected type names (upper case) by family; checked in this order (substring match).
_REFLECTED = (
    ("bool", ("BOOL", "TINYINT")),
    ("bigint", ("BIGINT",)),
    ("int", ("INT",)),
    ("numeric", ("NUMERIC", "DECIMAL")),
    ("text", ("TEXT", "CLOB")),
    ("string", ("CHAR", "STRING")),
    ("datetime", ("DATETIME", "TIMESTAMP")),
    ("date", ("DATE",)),
)


def reflected_family(sql_type: object) -> str:
    """The family of a reflected column type (dialect names differ, families do not)."""
    name = type(sql_type).__name__.upper()
    for family, markers in _REFLECTED:
        if any(marker in name for marker in markers):
            return family
    return name.lower()
