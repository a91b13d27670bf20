"""A property-based fuzz of the three admin APIs, on both backends: schemathesis (the `st`
CLI, as the REST dialect's fuzz in tests/e2e/test_sfcrm_clients.py) sends generated requests
to every `/admin/v1/...` operation of the FastAPI-generated OpenAPI documents of a real
runtime-api, catalog and integration, served in-process on real sockets; Catalog and
Integration ask that runtime-api whether the caller may operate them. No request may be
answered with a server error, and every documented answer must match its schema. The phases
are examples, coverage and fuzzing, bounded (few examples per operation, a fixed seed,
deterministic) so a run takes seconds.

The fuzzer signs in as a System Administrator of its own (`fuzzer`, not the bootstrap
`admin`) through a Connected App of its own. Schemathesis feeds values it read in earlier
answers (user, session and client ids from the lists) into later requests, which is what
lets it reach real users; it would also reach the fuzzer itself. So the three operations
that end the fuzzer's own access when given its own id run apart, in a second pass where
only generated values are used (feeding from answers off: no generated id is ever one of
the fuzzer's random ids):

    POST /admin/v1/runtime/users/{user_id}/password         ends the user's sessions
    POST /admin/v1/runtime/sessions/{session_id}/revoke      ends the fuzzer's session
    POST /admin/v1/runtime/connected-apps/{client_id}/disable  disables the fuzzer's client

(`.../users/{user_id}/deactivate` refuses the caller itself and stays in the first pass.)
Nothing is excluded from the fuzz. That the token still works after each run is asserted,
so a fuzz that locked itself out and then only heard 401s cannot pass.

The generated `authorization` header parameter is taken out of the documents: the fuzzer's
bearer token is the credential (a generated one would only exercise the 401 path).

The bounded runs find no server error now. The ones found while building this fuzz (at
boundaries generated values rarely hit: a 64-bit overflow, a recursion limit) are pinned
below as focused regression cases."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from nexus.catalog.app import create_app as create_catalog_app
from nexus.contracts.roles import LogicalService
from nexus.identity import admin
from nexus.identity.service import NewClient
from nexus.identity.setup import bootstrap_first_admin
from nexus.integration.app import create_app as create_integration_app
from nexus.platform.db.engine import create_engine, session_factory
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets
from nexus.platform.settings import load_settings
from nexus.runtime.app import create_api_app
from tests.conftest import Backend
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_PASSWORD = "fuzz-admin-password-1"
FUZZER = "fuzzer"
FUZZER_PASSWORD = "fuzzer-password-for-tests-1"
#: (method, path) of the operations that end the fuzzer's own access given its own id
SELF_LOCKING = {
    ("post", "/admin/v1/runtime/users/{user_id}/password"),
    ("post", "/admin/v1/runtime/sessions/{session_id}/revoke"),
    ("post", "/admin/v1/runtime/connected-apps/{client_id}/disable"),
}
#: run -> (area, operations of the self-locking set or the others, values fed from answers)
RUNS = {
    "runtime": ("runtime", False, True),
    "runtime-self-locking": ("runtime", True, False),
    "catalog": ("catalog", False, True),
    "integration": ("integration", False, True),
}
CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance"
MAX_EXAMPLES = 8
SEED = 8
RUN_TIMEOUT_SECONDS = 300


@dataclass
class AdminStack:
    urls: dict[str, str]
    documents: dict[str, dict[str, Any]]
    token: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def call(self, area: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.urls[area], timeout=30) as client:
            headers = {**self.headers(), **kwargs.pop("headers", {})}
            return await client.request(
                method, f"/admin/v1/{area}{path}", headers=headers, **kwargs
            )


def admin_document(document: dict[str, Any], *, self_locking: bool) -> dict[str, Any]:
    """The `/admin/v1/...` operations of an app's OpenAPI document that are (or are not) in
    `SELF_LOCKING`, without the `authorization` header parameter (the fuzzer's token is
    sent instead)."""
    document = copy.deepcopy(document)
    paths = {}
    for path, methods in document["paths"].items():
        item = {
            method: operation
            for method, operation in methods.items()
            if path.startswith("/admin/v1/") and ((method, path) in SELF_LOCKING) == self_locking
        }
        if not item:
            continue
        for operation in item.values():
            kept = [
                p
                for p in operation.get("parameters", [])
                if not (p["in"] == "header" and p["name"].lower() == "authorization")
            ]
            if kept:
                operation["parameters"] = kept
            else:
                operation.pop("parameters", None)
        paths[path] = item
    return {**document, "paths": paths}


async def sign_in(runtime_url: str, client: NewClient) -> str:
    # argon2 is slow on purpose: a sign-in can take seconds on a loaded machine
    async with httpx.AsyncClient(base_url=runtime_url, timeout=30) as http:
        reply = await http.post(
            "/services/oauth2/token",
            data={
                "grant_type": "password",
                "username": FUZZER,
                "password": FUZZER_PASSWORD,
                "client_id": client.client_id,
                "client_secret": client.client_secret or "",
                "scope": "api admin",
            },
        )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AdminStack]:
    var_dir = tmp_path_factory.mktemp("admin-fuzz-var")
    engines = {
        service: create_engine(backend.url(service), application_name="nexus-test")
        for service in (LogicalService.RUNTIME, LogicalService.CATALOG, LogicalService.INTEGRATION)
    }
    try:
        for service, engine in engines.items():
            await upgrade_to_head(engine, service)
        sessions = session_factory(engines[LogicalService.RUNTIME])
        await bootstrap_first_admin(sessions, password=ADMIN_PASSWORD)
        await admin.create_user(
            sessions,
            username=FUZZER,
            password=FUZZER_PASSWORD,
            email="fuzzer@example.com",
            display_name="Fuzzer",
            is_admin=True,
        )
        fuzzer_client = await admin.create_client(
            sessions,
            name="Admin API fuzzer",
            redirect_uris=[],
            grant_types=["password"],
            scopes=["api", "admin"],
            run_as_username=None,
            public=False,
        )
        ensure_local_secrets(var_dir, ["catalog", "integration", "gateway"])
        databases = {
            "runtime_database_url": backend.url(LogicalService.RUNTIME),
            "catalog_database_url": backend.url(LogicalService.CATALOG),
            "integration_database_url": backend.url(LogicalService.INTEGRATION),
        }
        runtime_app = create_api_app(load_settings(var_dir=var_dir, **databases))
        async with serving(runtime_app) as runtime_url:
            integration_app = create_integration_app(
                load_settings(
                    var_dir=var_dir,
                    runtime_api_url=runtime_url,
                    integration_catalog_poll_seconds=0,  # no Catalog to follow
                    **databases,
                ),
                loops="none",
            )
            async with serving(integration_app) as integration_url:
                catalog_app = create_catalog_app(
                    load_settings(
                        var_dir=var_dir,
                        runtime_api_url=runtime_url,
                        integration_url=integration_url,
                        **databases,
                    )
                )
                async with serving(catalog_app) as catalog_url:
                    yield AdminStack(
                        urls={
                            "runtime": runtime_url,
                            "catalog": catalog_url,
                            "integration": integration_url,
                        },
                        documents={
                            "runtime": runtime_app.openapi(),
                            "catalog": catalog_app.openapi(),
                            "integration": integration_app.openapi(),
                        },
                        token=await sign_in(runtime_url, fuzzer_client),
                    )
    finally:
        for engine in engines.values():
            await engine.dispose()


# ---------------------------------------------------------------------------- the fuzz


def fuzz_config(*, from_answers: bool) -> str:
    """schemathesis.toml: whether values read in answers are fed into later requests."""
    feed = "true" if from_answers else "false"
    return "".join(
        f"[phases.{phase}.extra-data-sources]\nresponses = {feed}\n"
        for phase in ("examples", "coverage", "fuzzing")
    )


async def run_schemathesis(
    stack: AdminStack, area: str, document: dict[str, Any], *, from_answers: bool, cwd: Path
) -> tuple[int, str]:
    """(exit code, output) of one `st run` against the area's app."""
    (cwd / "openapi.json").write_text(json.dumps(document))
    (cwd / "schemathesis.toml").write_text(fuzz_config(from_answers=from_answers))
    st = Path(sys.executable).with_name("st")
    process = await asyncio.create_subprocess_exec(  # the servers run on this event loop
        str(st),
        "--config-file",
        str(cwd / "schemathesis.toml"),
        "run",
        str(cwd / "openapi.json"),
        "--url",
        stack.urls[area],
        "--header",
        f"Authorization: Bearer {stack.token}",
        "--checks",
        CHECKS,
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--workers",
        "1",  # hypothesis describes strategies with ast: not thread-safe on Python 3.11
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--generation-codec",
        "utf-8",
        "--no-color",
        env={k: v for k, v in os.environ.items() if not k.startswith(("REQUESTS_CA", "CURL_CA"))},
        cwd=cwd,  # schemathesis keeps its example cache in the working directory
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(RUN_TIMEOUT_SECONDS):
        out, _ = await process.communicate()
    return process.returncode or 0, out.decode(errors="replace")


@pytest.mark.parametrize("run", RUNS)
async def test_schemathesis_finds_no_server_errors(
    stack: AdminStack, run: str, tmp_path: Path
) -> None:
    area, self_locking, from_answers = RUNS[run]
    document = admin_document(stack.documents[area], self_locking=self_locking)
    operations = {(m, p) for p, methods in document["paths"].items() for m in methods}
    assert operations, "no admin operations to fuzz"
    if self_locking:
        assert operations == SELF_LOCKING  # a renamed one would otherwise lock the fuzzer out
    code, output = await run_schemathesis(
        stack, area, document, from_answers=from_answers, cwd=tmp_path
    )
    assert code == 0, output[-10000:]
    # the fuzzer was not locked out half-way (it would then only have heard 401s)
    still = await stack.call("runtime", "GET", "/users")
    assert still.status_code == 200, still.text


# ---------------------------------------------------------------------------- regressions
# Server errors found while building this fuzz, each answered now with the error envelope.

BEYOND_64_BITS = "9" * 30 + ".w1"


@pytest.mark.parametrize(
    ("method", "path", "request_args"),
    [
        ("GET", "/dead-letters", {"params": {"cursor": BEYOND_64_BITS}}),
        ("GET", "/halted-lanes", {"params": {"cursor": BEYOND_64_BITS}}),
        ("GET", "/failed-receipts", {"params": {"cursor": BEYOND_64_BITS}}),
        ("GET", "/dead-letters", {"params": {"cursor": "\u00b2\u00b3.w1"}}),  # superscripts
        (
            "POST",
            "/dead-letters/replay",
            {"json": {"since": "2020-01-01T00:00:00Z", "cursor": BEYOND_64_BITS}},
        ),
        (
            "POST",
            "/failed-receipts/replay",
            {"json": {"since": "2020-01-01T00:00:00Z", "cursor": BEYOND_64_BITS}},
        ),
    ],
)
async def test_a_cursor_that_is_no_page_position_is_refused(
    stack: AdminStack, method: str, path: str, request_args: dict[str, Any]
) -> None:
    # was: 500 (OverflowError binding the time into SQLite's 64-bit INTEGER; `int()` refusing
    # the superscript digits `str.isdigit()` let through, with Python's message)
    reply = await stack.call("integration", method, path, **request_args)
    assert reply.status_code == 400, reply.text
    assert reply.json()["code"] == "INVALID_CURSOR"
    assert reply.json()["message"] == "a cursor is what a previous page returned as next_cursor"


async def test_a_package_file_nested_too_deeply_is_an_invalid_package(stack: AdminStack) -> None:
    # was: 500 (RecursionError in PyYAML's composer)
    for files in (
        {"manifest.yaml": "[" * 5000},
        {"manifest.yaml": "format: 1\n", "components/deep.yaml": "components: " + "{a: " * 5000},
    ):
        reply = await stack.call("catalog", "POST", "/validate", json={"files": files})
        assert reply.status_code == 400, reply.text
        assert reply.json()["code"] == "INVALID_PACKAGE"
        deep = next(name for name in files if name != "manifest.yaml" or len(files) == 1)
        assert reply.json()["fields"][f"{deep}: (file)"] == "not YAML: nested too deeply"
