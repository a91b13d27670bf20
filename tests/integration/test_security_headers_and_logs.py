"""What every answer carries and what a request leaves in the logs, on real sockets: `nosniff`
from every role, HSTS over TLS, the gateway's /metrics and /version only with its ops token,
and access logs and metric labels that name the route, never record values or SOQL."""

from __future__ import annotations

import io
import json
import logging
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from nexus.apps.sfcrm.app import create_app as create_sfcrm_app
from nexus.catalog.app import create_app as create_catalog_app
from nexus.gateway.app import create_app as create_gateway_app
from nexus.platform.observability import configure_logging
from nexus.platform.settings import SettingsError, load_settings
from nexus.platform.tls import ensure_local_tls
from tests.integration.test_gateway_proxy import UPSTREAM_FIELDS
from tests.support.servers import closed_port_url, serving, serving_client

pytestmark = pytest.mark.asyncio

OPS_TOKEN = "ops-token-for-the-security-tests-0123456789"
OPS = {"authorization": f"Bearer {OPS_TOKEN}"}
NOSNIFF = "x-content-type-options"
HSTS = "strict-transport-security"
EXTERNAL_ID = "EXT-SECRET-4711"
SOQL_VALUE = "Q-SECRET-0815"


def sniffing_upstream() -> FastAPI:
    """A role stand-in that sends its own `nosniff` (the gateway must not double it)."""
    app = FastAPI()

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    @app.api_route("/{path:path}", methods=["GET", "PATCH"])
    async def echo(request: Request, path: str) -> PlainTextResponse:
        return PlainTextResponse(f"/{path}", headers={NOSNIFF: "nosniff"})

    return app


def gateway_settings(tmp_path: Path, url: str, **extra: object):
    return load_settings(var_dir=tmp_path, **dict.fromkeys(UPSTREAM_FIELDS, url), **extra)


@pytest_asyncio.fixture
async def upstream_url() -> AsyncIterator[str]:
    async with serving(sniffing_upstream()) as url:
        yield url


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The process's JSON log lines (`configure_logging` as `nexus serve` runs it), kept."""
    configure_logging(role="gateway", level="info", fmt="json")
    kept = io.StringIO()
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(kept)
    yield kept
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


# ------------------------------------------------------------------------------- headers


async def test_every_role_answers_nosniff_and_plain_http_has_no_hsts(
    tmp_path: Path, upstream_url: str
) -> None:
    gateway = create_gateway_app(gateway_settings(tmp_path, upstream_url))
    async with serving_client(gateway) as client:
        for reply in (
            await client.get("/healthz"),  # the gateway's own FastAPI endpoint
            await client.get("/services/data/v60.0/sobjects"),  # relayed from the upstream
            await client.get("/services/nope"),  # the gateway's own 404
        ):
            assert reply.headers.get_list(NOSNIFF) == ["nosniff"], reply.url
            assert HSTS not in reply.headers
    settings = load_settings(var_dir=tmp_path, app_catalog_poll_seconds=0)
    for app in (create_sfcrm_app(settings), create_catalog_app(settings)):
        async with serving_client(app) as client:
            for reply in (await client.get("/healthz"), await client.get("/no/such/path")):
                assert reply.headers.get_list(NOSNIFF) == ["nosniff"], reply.url
                assert HSTS not in reply.headers


async def test_answers_over_tls_carry_hsts(tmp_path: Path, upstream_url: str) -> None:
    tls = ensure_local_tls(tmp_path)
    https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    gateway = create_gateway_app(gateway_settings(tmp_path, upstream_url))
    async with (
        serving(gateway, **https) as url,
        httpx.AsyncClient(
            base_url=url,
            verify=ssl.create_default_context(cafile=str(tls.ca_cert)),
            # an idle kept-alive TLS connection holds a stopping uvicorn for its close timeout
            headers={"connection": "close"},
        ) as client,
    ):
        for path in ("/healthz", "/services/data/v60.0/sobjects", "/services/nope"):
            reply = await client.get(path)
            assert reply.headers[HSTS] == "max-age=31536000; includeSubDomains", path
            assert reply.headers.get_list(NOSNIFF) == ["nosniff"], path


# ------------------------------------------------------------------- ops endpoints


async def test_the_gateway_serves_metrics_and_version_only_with_its_ops_token(
    tmp_path: Path, upstream_url: str
) -> None:
    settings = gateway_settings(tmp_path, upstream_url, gateway_ops_token=OPS_TOKEN)
    async with serving_client(create_gateway_app(settings)) as client:
        for path in ("/metrics", "/version", "/_roles/catalog/version"):
            for headers in (
                {},
                {"authorization": "Bearer not-the-token"},
                {"authorization": OPS_TOKEN},
            ):
                refused = await client.get(path, headers=headers)
                assert refused.status_code == 401, (path, headers)
                assert refused.json()["code"] == "INVALID_OPS_TOKEN"
                assert "nexus_" not in refused.text
            assert (await client.get(path, headers=OPS)).status_code == 200, path
        assert "nexus_http_requests_total" in (await client.get("/metrics", headers=OPS)).text
        assert (await client.get("/version", headers=OPS)).json()["role"] == "gateway"
        # probes stay open
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/_roles/catalog/healthz")).status_code == 200


async def test_without_an_ops_token_set_nobody_gets_metrics_or_version(
    tmp_path: Path, upstream_url: str
) -> None:
    async with serving_client(create_gateway_app(gateway_settings(tmp_path, upstream_url))) as c:
        for path in ("/metrics", "/version"):
            assert (await c.get(path)).status_code == 401
            assert (await c.get(path, headers={"authorization": "Bearer x" * 8})).status_code == 401
    with pytest.raises(SettingsError, match="NEXUS_GATEWAY_OPS_TOKEN"):
        load_settings(var_dir=tmp_path, gateway_ops_token="short")


# ------------------------------------------------------------------------------- logs


async def test_logs_and_metrics_name_routes_never_values(
    tmp_path: Path, json_logs: io.StringIO
) -> None:
    """Through the gateway to the real sfcrm app: an upsert by external id and a SOQL query
    (401: no session) leave their route templates in the logs, not the id or the SOQL."""
    settings = load_settings(var_dir=tmp_path, app_catalog_poll_seconds=0)
    async with serving(create_sfcrm_app(settings)) as app_url:
        urls = dict.fromkeys(UPSTREAM_FIELDS, closed_port_url()) | {"app_sfcrm_url": app_url}
        gateway = create_gateway_app(
            load_settings(var_dir=tmp_path, gateway_ops_token=OPS_TOKEN, **urls)
        )
        async with serving_client(gateway) as client:
            upsert = await client.patch(
                f"/services/data/v60.0/sobjects/Account/External_Id__c/{EXTERNAL_ID}",
                json={"Name": "Acme"},
            )
            query = await client.get(
                "/services/data/v60.0/query",
                params={"q": f"SELECT Id FROM Account WHERE Name = '{SOQL_VALUE}'"},
            )
            metrics = (await client.get("/metrics", headers=OPS)).text
    assert (upsert.status_code, query.status_code) == (401, 401)
    text = json_logs.getvalue()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "http.request"]
    routes = {(line["method"], line["route"]) for line in requests}
    assert ("PATCH", "/services/data/{version}/sobjects/{name}/{field}/{value:path}") in routes
    assert ("GET", "/services/data/{version}/query") in routes
    assert ("PATCH", "proxy:app:sfcrm:/services/data") in routes
    assert ("GET", "proxy:app:sfcrm:/services/data") in routes
    assert all("path" not in line for line in requests)
    for value in (EXTERNAL_ID, SOQL_VALUE, "SELECT", "External_Id__c/"):
        assert value not in text, f"{value!r} in the logs"
        assert value not in metrics, f"{value!r} in a metric label"
    assert 'route="proxy:app:sfcrm:/services/data"' in metrics
