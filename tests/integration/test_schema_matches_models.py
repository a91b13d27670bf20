"""The migrations build exactly the tables the models describe (no drift), on both backends."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData

from nexus.catalog.models import metadata as catalog_metadata
from nexus.contracts.roles import LogicalService
from nexus.identity.models import metadata as identity_metadata
from nexus.integration.tables import all_tables as integration_tables
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head, version_table
from nexus.runtime.tables import all_tables
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio


def _runtime_models(backend: str) -> MetaData:
    """The runtime tables; on SQLite without the FTS5 virtual tables (`virtual_on_sqlite`),
    which reflection cannot describe: their columns are checked by the search tests."""
    combined = MetaData()
    for source in (identity_metadata, all_tables()):
        for table in source.tables.values():
            if backend == "sqlite" and table.info.get("virtual_on_sqlite"):
                continue
            table.to_metadata(combined)
    return combined


async def _differences(url: str, service: LogicalService, models: MetaData) -> list[object]:
    engine = create_engine(url, application_name="nexus-test")
    try:
        await upgrade_to_head(engine, service)

        def diff(conn):  # type: ignore[no-untyped-def]
            context = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "version_table": version_table(service),
                    "include_name": lambda name, kind, _parent: (
                        kind != "table" or name in models.tables
                    ),
                },
            )
            return compare_metadata(context, models)

        async with engine.connect() as conn:
            return list(await conn.run_sync(diff))
    finally:
        await engine.dispose()


async def test_runtime_migrations_match_the_models(backend: Backend) -> None:
    models = _runtime_models(backend.name)
    assert (
        await _differences(backend.url(LogicalService.RUNTIME), LogicalService.RUNTIME, models)
        == []
    )


async def test_integration_migrations_match_the_models(backend: Backend) -> None:
    url = backend.url(LogicalService.INTEGRATION)
    assert await _differences(url, LogicalService.INTEGRATION, integration_tables()) == []


async def test_catalog_migrations_match_the_models(backend: Backend) -> None:
    url = backend.url(LogicalService.CATALOG)
    assert await _differences(url, LogicalService.CATALOG, catalog_metadata) == []
