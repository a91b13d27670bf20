"""The gateway over real sockets: routing, streaming, admission, request ids, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from nexus.gateway.app import create_app as create_gateway_app
from nexus.gateway.route_table import load_route_table
from nexus.platform.settings import load_settings
from tests.support.servers import closed_port_url, serving, serving_client

pytestmark = pytest.mark.asyncio

BODY_LIMIT = 64 * 1024
LARGE_BODY_LIMIT = 4 * BODY_LIMIT
OPS_TOKEN = "ops-token-for-the-gateway-tests-0123456789"
OPS = {"authorization": f"Bearer {OPS_TOKEN}"}
UPSTREAM_FIELDS = (
    "runtime_api_url",
    "runtime_worker_url",
    "catalog_url",
    "integration_url",
    "app_sfcrm_url",
)


def fake_upstream(name: str) -> FastAPI:
    """Stands in for a role: echoes what it received, and can be slow or not ready."""
    app = FastAPI()
    app.state.ready = True

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        return JSONResponse({"upstream": name}, status_code=200 if app.state.ready else 503)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PATCH", "DELETE"])
    async def echo(request: Request, path: str) -> StreamingResponse:
        if path.endswith("slow"):
            await asyncio.sleep(1.5)
        body = await request.body()

        async def chunks() -> AsyncIterator[bytes]:
            yield f"{name} {request.method} /{path}?{request.url.query}\n".encode()
            yield f"request-id={request.headers.get('x-request-id')}\n".encode()
            yield f"internal={request.headers.get('x-nexus-delegation')}\n".encode()
            yield f"forwarded-for={request.headers.get('x-forwarded-for')}\n".encode()
            yield f"bytes={len(body)}\n".encode()

        headers = {"x-upstream": name}
        if path.endswith("login"):
            headers["set-cookie"] = "sid=alice-session; Path=/"
        headers["x-saw-cookie"] = request.headers.get("cookie") or "none"
        return StreamingResponse(chunks(), media_type="text/plain", headers=headers)

    return app


@pytest_asyncio.fixture
async def upstream_url() -> AsyncIterator[str]:
    async with serving(fake_upstream("up")) as url:
        yield url


def gateway_settings(tmp_path, urls: dict[str, str], **extra: object):
    return load_settings(
        var_dir=tmp_path,
        gateway_body_limit_bytes=BODY_LIMIT,
        gateway_large_body_limit_bytes=LARGE_BODY_LIMIT,
        gateway_ops_token=OPS_TOKEN,
        **urls,
        **extra,
    )


@pytest_asyncio.fixture
async def gateway(upstream_url: str, tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    settings = gateway_settings(
        tmp_path, dict.fromkeys(UPSTREAM_FIELDS, upstream_url), gateway_upstream_timeout_seconds=0.5
    )
    async with serving_client(create_gateway_app(settings), timeout=10) as client:
        yield client


async def test_routes_by_prefix_and_propagates_the_request_id(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.get("/services/data/v60.0/sobjects?x=1")
    assert reply.status_code == 200
    assert reply.headers["x-upstream"] == "up"
    request_id = reply.headers["x-request-id"]
    assert "up GET /services/data/v60.0/sobjects?x=1" in reply.text
    assert f"request-id={request_id}" in reply.text


async def test_keeps_a_well_formed_client_request_id(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.get("/webhooks/x", headers={"x-request-id": "client-req-0001"})
    assert reply.headers["x-request-id"] == "client-req-0001"
    assert "request-id=client-req-0001" in reply.text
    bad = await gateway.get("/webhooks/x", headers={"x-request-id": "bad id\twith spaces"})
    assert bad.headers["x-request-id"] != "bad id\twith spaces"


async def test_clients_cannot_inject_internal_headers(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.get("/webhooks/x", headers={"x-nexus-delegation": "admin"})
    assert "internal=None" in reply.text


async def test_cookies_pass_through_but_are_never_kept_for_other_callers(
    gateway: httpx.AsyncClient,
) -> None:
    login = await gateway.get("/webhooks/login")
    assert login.headers["set-cookie"] == "sid=alice-session; Path=/"
    gateway.cookies.clear()  # the next caller is somebody else, with no cookie of their own
    other = await gateway.get("/webhooks/anything")
    assert other.headers["x-saw-cookie"] == "none"
    own = await gateway.get("/webhooks/anything", headers={"cookie": "sid=bob"})
    assert own.headers["x-saw-cookie"] == "sid=bob"


async def test_streams_a_body_below_the_limit(gateway: httpx.AsyncClient) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield b"x" * 4096

    reply = await gateway.post("/webhooks/stream", content=body())
    assert reply.status_code == 200
    assert f"bytes={8 * 4096}" in reply.text


async def test_413_when_declared_length_is_above_the_limit(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.post("/webhooks/big", content=b"x" * (BODY_LIMIT + 1))
    assert reply.status_code == 413
    assert reply.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert reply.json()["request_id"] == reply.headers["x-request-id"]


async def test_413_when_a_chunked_body_grows_past_the_limit(gateway: httpx.AsyncClient) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(BODY_LIMIT // 4096 + 4):
            yield b"y" * 4096

    reply = await gateway.post("/webhooks/big", content=body())
    assert reply.status_code == 413
    assert reply.json()["code"] == "PAYLOAD_TOO_LARGE"


async def test_a_large_bodies_route_takes_uploads_up_to_its_own_limit(
    gateway: httpx.AsyncClient,
) -> None:
    """The dialect's route (Bulk API CSV uploads) takes bodies past the gateway's limit, up to
    the large-body limit, declared or chunked; other routes keep the gateway's limit."""
    upload = "/services/data/v62.0/jobs/ingest/750000000000001AAA/batches"
    declared = await gateway.put(upload, content=b"x" * (3 * BODY_LIMIT))
    assert declared.status_code == 405  # reached the upstream (the echo has no PUT)

    async def chunks(n: int) -> AsyncIterator[bytes]:
        for _ in range(n // 4096):
            yield b"y" * 4096

    streamed = await gateway.post(upload, content=chunks(3 * BODY_LIMIT))
    assert streamed.status_code == 200
    assert f"bytes={3 * BODY_LIMIT}" in streamed.text
    too_big = await gateway.post(upload, content=b"x" * (LARGE_BODY_LIMIT + 1))
    assert too_big.status_code == 413
    chunked_too_big = await gateway.post(upload, content=chunks(LARGE_BODY_LIMIT + 8192))
    assert chunked_too_big.status_code == 413
    elsewhere = await gateway.post("/admin/v1/runtime/x", content=b"x" * (3 * BODY_LIMIT))
    assert elsewhere.status_code == 413


async def test_504_when_the_upstream_is_too_slow(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.get("/webhooks/slow")
    assert reply.status_code == 504
    assert reply.json()["code"] == "UPSTREAM_TIMEOUT"


async def test_unknown_paths_and_restricted_routes_are_404(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.get("/admin/v1/nope")).status_code == 404
    # the whole `/services` namespace is the dialect App's: it answers its own NOT_FOUND
    assert "up GET /services/nope" in (await gateway.get("/services/nope")).text
    assert (await gateway.post("/nope")).status_code == 404  # the static bundle is GET/HEAD only
    # `/admin/v1/runtimex` shares a string prefix with `/admin/v1/runtime`, not a segment.
    assert (await gateway.get("/admin/v1/runtimex")).status_code == 404
    # operational routes expose only their listed sub-paths, and only for GET
    assert (await gateway.get("/_roles/catalog/version", headers=OPS)).status_code == 200
    assert (await gateway.get("/_roles/catalog/version")).status_code == 401
    assert (await gateway.get("/_roles/catalog/internal/v1/x")).status_code == 404
    assert (await gateway.post("/_roles/catalog/version")).status_code == 404


async def test_502_with_a_json_body_when_the_upstream_is_down(tmp_path) -> None:
    settings = gateway_settings(tmp_path, dict.fromkeys(UPSTREAM_FIELDS, closed_port_url()))
    async with serving_client(create_gateway_app(settings)) as c:
        reply = await c.get("/services/data/v60.0/")
    assert reply.status_code == 502
    assert reply.json()["code"] == "UPSTREAM_UNAVAILABLE"
    assert reply.json()["request_id"] == reply.headers["x-request-id"]


async def test_readyz_lists_every_upstream_and_is_503_unless_all_ready(tmp_path) -> None:
    upstreams = {field: fake_upstream(field) for field in UPSTREAM_FIELDS}
    async with (
        serving(upstreams["runtime_api_url"]) as u1,
        serving(upstreams["runtime_worker_url"]) as u2,
        serving(upstreams["catalog_url"]) as u3,
        serving(upstreams["integration_url"]) as u4,
        serving(upstreams["app_sfcrm_url"]) as u5,
    ):
        urls = dict(zip(UPSTREAM_FIELDS, (u1, u2, u3, u4, u5), strict=True))
        async with serving_client(create_gateway_app(gateway_settings(tmp_path, urls))) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            names = {c["name"] for c in ready.json()["checks"]}
            assert names == {f"upstream:{u}" for u in load_route_table().upstreams}

            upstreams["catalog_url"].state.ready = False
            degraded = await client.get("/readyz")
            assert degraded.status_code == 503
            states = {c["name"]: c for c in degraded.json()["checks"]}
            assert states["upstream:catalog"]["ok"] is False
            assert states["upstream:runtime-api"]["ok"] is True

            version = (await client.get("/version", headers=OPS)).json()
            assert version["route_table_version"] == load_route_table().version


async def test_doubled_slashes_reach_the_route_of_the_single_slash_path(
    gateway: httpx.AsyncClient,
) -> None:
    """The `sf` CLI keeps `https://host/` as its instance URL and asks `//services/data/...`:
    the gateway routes it as `/services/data/...` and the upstream sees one slash."""
    for method in ("GET", "POST"):
        url = str(gateway.base_url).rstrip("/") + "//services/data//v59.0/query?q=x"
        reply = await gateway.request(method, url)
        assert reply.request.url.raw_path.startswith(b"//services/")
        assert reply.status_code == 200, reply.text
        assert reply.text.startswith(f"up {method} /services/data/v59.0/query?q=x\n")
