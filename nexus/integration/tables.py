"""The one MetaData of the integration database. Each area's `models` module registers its
tables here; `all_tables()` imports every area, so the whole schema is known at once (the
schema check against the migrations, tooling). Every key starts with `org_id`."""

from __future__ import annotations

import importlib

from sqlalchemy import MetaData

metadata = MetaData()

#: The areas that keep tables in the integration database (each has a `models` module).
AREAS = ("ingress", "routing", "delivery", "operations")


def all_tables() -> MetaData:
    for area in AREAS:
        importlib.import_module(f"nexus.integration.{area}.models")
    return metadata
