"""The one MetaData of Runtime's database. Each area's `models` module registers its tables
here; `all_tables()` imports every area, so the whole schema is known at once (the schema
check against the migrations, tooling)."""

from __future__ import annotations

import importlib

from sqlalchemy import MetaData

metadata = MetaData()

#: The areas that keep tables in Runtime's database (each has a `models` module).
AREAS = (
    "metadata",
    "access",
    "records",
    "search",
    "usage",
    "releases",
    "inbox",
    "outbox",
    "admin",
    "imports",
    "bulk",
)


def all_tables() -> MetaData:
    for area in AREAS:
        importlib.import_module(f"nexus.runtime.{area}.models")
    return metadata
