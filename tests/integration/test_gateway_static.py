"""The gateway's static route (the browser CRM bundle) over a real socket: cache headers,
client-side routing fallback, API prefixes that never fall back, and a bundle never built."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from nexus.gateway.app import create_app as create_gateway_app
from nexus.gateway.static import IMMUTABLE
from nexus.platform.settings import load_settings
from tests.support.servers import closed_port_url, serving_client

pytestmark = pytest.mark.asyncio(loop_scope="module")

INDEX = "<!doctype html><title>Nexus CRM</title><script src='/assets/app-3f9a.js'></script>"


UPSTREAM_FIELDS = ("runtime_api_url", "runtime_worker_url", "catalog_url", "integration_url")


def _gateway(root: Path, var_dir: Path) -> FastAPI:
    urls = dict.fromkeys((*UPSTREAM_FIELDS, "app_sfcrm_url"), closed_port_url())
    return create_gateway_app(load_settings(var_dir=var_dir, gateway_static_root=root, **urls))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[httpx.AsyncClient]:
    root = tmp_path_factory.mktemp("static")
    dist = root / "frontend" / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text(INDEX)
    (dist / "assets" / "app-3f9a.js").write_text("console.log('crm')")
    (dist / "favicon.svg").write_text("<svg/>")
    (root / "secret.txt").write_text("outside the bundle")
    app = _gateway(root, tmp_path_factory.mktemp("var"))
    async with serving_client(app, timeout=10) as client:
        yield client


async def test_index_is_served_at_the_root_and_always_revalidated(
    gateway: httpx.AsyncClient,
) -> None:
    reply = await gateway.get("/")
    assert reply.status_code == 200
    assert reply.text == INDEX
    assert reply.headers["content-type"].startswith("text/html")
    assert reply.headers["cache-control"] == "no-cache"
    assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]


async def test_hashed_assets_are_cached_for_a_year(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.get("/assets/app-3f9a.js")
    assert reply.status_code == 200
    assert reply.text == "console.log('crm')"
    assert reply.headers["cache-control"] == IMMUTABLE == "public, max-age=31536000, immutable"
    assert "javascript" in reply.headers["content-type"]
    other = await gateway.get("/favicon.svg")
    assert other.status_code == 200
    assert other.headers["cache-control"] == "no-cache"


@pytest.mark.parametrize("path", ["/lightning/o/Account/list", "/r/Account/001x", "/admin"])
async def test_page_paths_fall_back_to_the_index(gateway: httpx.AsyncClient, path: str) -> None:
    reply = await gateway.get(path)
    assert reply.status_code == 200
    assert reply.text == INDEX
    assert reply.headers["cache-control"] == "no-cache"


@pytest.mark.parametrize(
    "path",
    ["/assets/gone-1234.js", "/missing.png", "/../secret.txt", "/assets/%2e%2e/%2e%2e/secret.txt"],
)
async def test_missing_files_are_404_not_the_index(gateway: httpx.AsyncClient, path: str) -> None:
    reply = await gateway.get(path)
    assert reply.status_code == 404
    assert "outside the bundle" not in reply.text
    assert reply.text != INDEX


@pytest.mark.parametrize("path", ["/admin/v1/nothing", "/_roles", "/internal/x", "/hooks"])
async def test_api_prefixes_never_fall_back(gateway: httpx.AsyncClient, path: str) -> None:
    reply = await gateway.get(path)
    assert reply.status_code == 404
    assert reply.json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize("path", ["/services/data/v59.0/sobjects", "/services", "/services/x"])
async def test_api_routes_still_proxy(gateway: httpx.AsyncClient, path: str) -> None:
    reply = await gateway.get(path)
    assert reply.status_code == 502  # routed to the (stopped) sfcrm role, not to the bundle
    assert reply.json()["code"] != "NOT_FOUND"


async def test_head_answers_headers_without_a_body(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.head("/assets/app-3f9a.js")
    assert reply.status_code == 200
    assert reply.headers["cache-control"] == IMMUTABLE
    assert reply.content == b""


async def test_the_bundle_is_only_read(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.post("/", content=b"x")
    assert reply.status_code in (404, 405)


async def test_a_bundle_never_built_is_a_clear_503(tmp_path: Path) -> None:
    app = _gateway(tmp_path, tmp_path)
    async with serving_client(app, timeout=10) as client:
        for path in ("/", "/lightning/o/Account/list"):
            reply = await client.get(path)
            assert reply.status_code == 503
            assert "make frontend" in reply.text
            assert "Traceback" not in reply.text
