"""Each database-owning role reports ready only with its database reachable and at head."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
import pytest

from nexus.apps.sfcrm.app import create_app as create_sfcrm_app
from nexus.catalog.app import create_app as create_catalog_app
from nexus.contracts.roles import LogicalService
from nexus.integration.app import create_app as create_integration_app
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.settings import load_settings
from nexus.runtime.app import create_api_app, create_worker_app
from tests.conftest import Backend
from tests.support.servers import closed_port_url, serving, serving_client

pytestmark = pytest.mark.asyncio

ROLE_APPS = [
    ("runtime-api", create_api_app, LogicalService.RUNTIME),
    ("runtime-worker", create_worker_app, LogicalService.RUNTIME),
    ("catalog", create_catalog_app, LogicalService.CATALOG),
    ("integration", create_integration_app, LogicalService.INTEGRATION),
]


def _settings(backend: Backend, tmp_path: object) -> object:
    return load_settings(
        var_dir=tmp_path,
        runtime_database_url=backend.url(LogicalService.RUNTIME),
        catalog_database_url=backend.url(LogicalService.CATALOG),
        integration_database_url=backend.url(LogicalService.INTEGRATION),
    )


async def test_roles_are_not_ready_until_migrated_then_ready(backend: Backend, tmp_path) -> None:
    settings = _settings(backend, tmp_path)
    for service in LogicalService:
        roles = [(role, factory) for role, factory, owner in ROLE_APPS if owner is service]
        async with AsyncExitStack() as stack:
            clients = {}
            for role, factory in roles:
                url = await stack.enter_async_context(serving(factory(settings)))
                clients[role] = await stack.enter_async_context(httpx.AsyncClient(base_url=url))
            for role, client in clients.items():
                behind = await client.get("/readyz")
                assert behind.status_code == 503, role
                check = behind.json()["checks"][0]
                assert check["name"] == f"database:{service.value}"
                assert "schema behind" in check["detail"]

            engine = create_engine(backend.url(service), application_name="nexus-test")
            try:
                await upgrade_to_head(engine, service)
            finally:
                await engine.dispose()

            for role, client in clients.items():
                await _assert_ready_role(client, role)


async def _assert_ready_role(client: httpx.AsyncClient, role: str) -> None:
    ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"
    assert (await client.get("/healthz")).json() == {"status": "ok", "role": role}
    version = (await client.get("/version")).json()
    assert version["role"] == role
    assert version["engine_generation"] >= 1
    assert version["version"]
    assert isinstance(version["capabilities"], list)
    metrics = await client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert f'nexus_http_requests_total{{method="GET",role="{role}",route="/readyz"' in metrics.text


async def test_unreachable_database_is_not_ready_and_leaks_no_credentials(tmp_path) -> None:
    dead = closed_port_url().replace("http://", "mysql+aiomysql://user:s3cret-pw@") + "/nexus"
    settings = load_settings(var_dir=tmp_path, catalog_database_url=dead)
    async with serving_client(create_catalog_app(settings)) as c:
        reply = await c.get("/readyz")
    assert reply.status_code == 503
    assert reply.json()["checks"][0]["detail"].startswith("unreachable")
    assert "s3cret-pw" not in reply.text


async def test_app_service_serves_its_ops_endpoints(tmp_path) -> None:
    async with serving_client(create_sfcrm_app(load_settings(var_dir=tmp_path))) as client:
        assert (await client.get("/readyz")).status_code == 200
        version = (await client.get("/version")).json()
    assert version["role"] == "app"
    assert version["app"] == "sfcrm"


async def test_errors_use_the_json_envelope_with_the_request_id(tmp_path) -> None:
    async with serving_client(create_sfcrm_app(load_settings(var_dir=tmp_path))) as client:
        reply = await client.get("/no/such/path", headers={"x-request-id": "req-12345678"})
    assert reply.status_code == 404
    assert reply.headers["x-request-id"] == "req-12345678"
