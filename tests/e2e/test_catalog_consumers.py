"""Catalog's consumers, with real runtime-api, catalog and integration processes on SQLite and
MariaDB: Integration fetches its own snapshot (docs/adr/0033, no `nexus catalog apply` route
sync); runtime-api replicas acknowledge a release before it is ACTIVE and Runtime refuses a
stale fencing token (docs/adr/0034)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text

from nexus.contracts.roles import LogicalService
from nexus.integration.ingress.sender import signed_headers
from nexus.integration.routing.routes import RouteDeclaration
from nexus.platform.secrets import ensure_local_secrets, workload_signer, write_webhook_secret
from nexus.platform.settings import load_settings
from tests.conftest import Backend
from tests.e2e.test_catalog import (
    FINAL,
    NEXUS,
    PASSWORD,
    Stack,
    _start,
    _stop,
    _sync_url,
    _wait_ready,
    job_id_of,
    states_printed,
)
from tests.e2e.test_stack import free_port_base

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ="
POLL = "0.3"


def _route(connector: str, route: str) -> dict[str, Any]:
    return {
        "connector": connector,
        "route": route,
        "signature": {"scheme": "standard_webhooks"},
        "secrets": ["consumer-test"],
        "event_kind": {"pointer": "/type"},
    }


def _package(root: Path, version: str, routes: list[str]) -> Path:
    """A one-object App declaring the connector routes `hooked/<name>`."""
    (root / "components").mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": "nexus.app/v1",
        "app_id": "hooked",
        "publisher_id": "nexus-tests",
        "version": version,
        "label": "Hooked",
        "namespaces": ["hooked"],
        "requires": {"capabilities": ["runtime.metadata.v1", "webhooks.ingress.v1"]},
    }
    (root / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    thing = {
        "kind": "object",
        "key": "Hooked_Thing__c",
        "definition": {
            "api_name": "Hooked_Thing__c",
            "label": "Thing",
            "plural_label": "Things",
            "key_prefix": "a7H",
            "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
            "fields": [],
        },
    }
    components = [thing] + [
        {"kind": "connector_route", "key": f"hooked/{r}", "definition": _route("hooked", r)}
        for r in routes
    ]
    (root / "components" / "all.yaml").write_text(yaml.safe_dump({"components": components}))
    return root


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*.yaml")}


@pytest.fixture(scope="module")
def stack(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("consumers")
    base = free_port_base()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(tmp / "var"),
        NEXUS_PORT_BASE=str(base),
        NEXUS_BOOTSTRAP_ADMIN_PASSWORD=PASSWORD,
        NEXUS_LOG_FORMAT="json",
        NEXUS_INTEGRATION_CATALOG_POLL_SECONDS=POLL,
        NEXUS_APP_CATALOG_POLL_SECONDS=POLL,
        NEXUS_INGRESS_ROUTE_CACHE_SECONDS="0.2",
        NEXUS_RUNTIME_REPLICA_ID="replica-a",
        NEXUS_RUNTIME_REPLICA_LIVE_SECONDS="60",
        NEXUS_CATALOG_REPLICA_ACK_TIMEOUT_SECONDS="5",
        **backend.env(),
    )
    ensure_local_secrets(tmp / "var", ["catalog", "runtime-api", "integration", "app-sfcrm"])
    write_webhook_secret(tmp / "var", "consumer-test", SECRET)
    catalog_db = create_engine(_sync_url(backend.url(LogicalService.CATALOG)))
    runtime_db = create_engine(_sync_url(backend.url(LogicalService.RUNTIME)))
    stack = Stack(env, tmp, base, catalog_db, runtime_db)
    assert stack.nexus("migrate").returncode == 0
    assert stack.nexus("admin", "bootstrap").returncode == 0
    procs = [_start(stack, "--role=runtime-api", port_offset=1)]
    try:
        procs.append(_start(stack, "--role=integration", "--loops=none", port_offset=4))
        procs.append(_start(stack, "--role=app", "--app=sfcrm", port_offset=5))
        yield stack
    finally:
        for proc in reversed(procs):
            _stop(proc)
        catalog_db.dispose()
        runtime_db.dispose()


def _deliver(stack: Stack, connector: str, route: str) -> int:
    """POST a signed delivery straight to integration; the status it answers."""
    url = f"http://127.0.0.1:{stack.base + 4}/hooks/{connector}/{route}"
    body = json.dumps({"type": "thing.updated", "id": "t1"}).encode()
    declaration = RouteDeclaration.model_validate(_route(connector, route))
    headers = signed_headers(declaration, SECRET, body=body, url=url)
    return httpx.post(url, content=body, headers=headers, timeout=10).status_code


def _until(check: Callable[[], bool], what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _logged(stack: Stack, event: str) -> int:
    return (stack.tmp / "integration.log").read_text().count(event)


def _admin_apply(stack: Stack, root: Path) -> dict[str, Any]:
    token = httpx.post(
        f"http://127.0.0.1:{stack.base + 1}/services/oauth2/token",
        data={"grant_type": "password", "username": "admin", "password": PASSWORD},
    )
    assert token.status_code == 200, token.text
    reply = httpx.post(
        f"http://127.0.0.1:{stack.base + 3}/admin/v1/catalog/apply",
        json={"files": _files(root)},
        headers={"authorization": f"Bearer {token.json()['access_token']}"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["state"] == "ACTIVE", reply.text
    return dict(reply.json())


def _routes(stack: Stack) -> dict[str, tuple[bool, str | None]]:
    engine = create_engine(_sync_url(stack.env["NEXUS_INTEGRATION_DATABASE_URL"]))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT connector, route_key, active, owner FROM integration_route")
            )
            return {f"{r.connector}/{r.route_key}": (bool(r.active), r.owner) for r in rows}
    finally:
        engine.dispose()


def _app_release(stack: Stack) -> dict[str, Any] | None:
    """What the sfcrm App service reports as the release it follows (its `app` snapshot)."""
    reply = httpx.get(f"http://127.0.0.1:{stack.base + 5}/version", timeout=10)
    assert reply.status_code == 200, reply.text
    release: dict[str, Any] | None = reply.json().get("release")
    return release


def _app_follows(stack: Stack, revision: int, version: str) -> bool:
    release = _app_release(stack)
    return (
        release is not None
        and release["catalog_revision"] == revision
        and {"app_id": "hooked", "version": version}.items()
        <= next((a for a in release["apps"] if a["app_id"] == "hooked"), {}).items()
    )


def test_integration_follows_the_active_snapshot(stack: Stack) -> None:
    catalog = _start(stack, "--role=catalog", port_offset=3)
    try:
        # 1. an apply through the admin API: the routes work without any CLI sync
        first = _admin_apply(stack, _package(stack.tmp / "h100", "1.0.0", ["a", "b"]))
        _until(lambda: _deliver(stack, "hooked", "a") == 200, "hooked/a never served")
        assert _deliver(stack, "hooked", "b") == 200
        assert _routes(stack)["hooked/b"] == (True, "hooked")
        # the App service follows its own snapshot too
        _until(
            lambda: _app_follows(stack, first["catalog_revision"], "1.0.0"),
            f"the app never reported revision {first['catalog_revision']}: {_app_release(stack)}",
        )

        # a route applied by hand is the operator's: no snapshot ever touches it
        hand = stack.tmp / "hand.yaml"
        assert first["catalog_revision"] == stack.org()["active_revision"]
        org_id = stack.org()["org_id"]
        hand.write_text(yaml.safe_dump({"org_id": org_id, "routes": [_route("hand", "feed")]}))
        applied = stack.nexus("integration", "apply-routes", str(hand))
        assert applied.returncode == 0, applied.stderr

        # 2. a release without route b: b answers 404 (inactive), a and the hand route serve
        second = _admin_apply(stack, _package(stack.tmp / "h110", "1.1.0", ["a"]))
        _until(lambda: _deliver(stack, "hooked", "b") == 404, "hooked/b still served")
        _until(
            lambda: _app_follows(stack, second["catalog_revision"], "1.1.0"),
            f"the app never reported 1.1.0: {_app_release(stack)}",
        )
        assert _deliver(stack, "hooked", "a") == 200
        assert _deliver(stack, "hand", "feed") == 200
        routes = _routes(stack)
        assert routes["hooked/b"] == (False, "hooked")
        assert routes["hand/feed"] == (True, None)

        # 3. a newer snapshot that fails verification: the last verified one stays in force
        crashed = stack.apply(
            _package(stack.tmp / "h120", "1.2.0", ["a", "c"]),
            NEXUS_FAILPOINT="catalog.after.SNAPSHOT_PUBLISHED",
        )
        assert crashed.returncode == 137, crashed.stderr
        assert states_printed(crashed.stdout)[-1] == "SNAPSHOT_PUBLISHED"
        revision = stack.org()["catalog_revision"]
        with stack.catalog_db.begin() as conn:  # tampered at rest: routes gone, same checksum
            conn.execute(
                text(
                    "UPDATE catalog_snapshot SET content = :c WHERE consumer = 'integration'"
                    " AND catalog_revision = :r"
                ),
                {"c": json.dumps({"apps": [], "routes": []}), "r": revision},
            )
        resumed = stack.nexus("catalog", "resume")
        assert resumed.returncode == 0, resumed.stderr
        assert stack.org()["active_revision"] == revision
        _until(lambda: _logged(stack, "catalog.snapshot_rejected") > 0, "tampering not noticed")
        time.sleep(float(POLL) * 3)
        assert _deliver(stack, "hooked", "a") == 200  # not deactivated by the tampered one
        assert _deliver(stack, "hooked", "c") == 404  # nor anything of it applied
        assert "snapshot checksum does not match" in (stack.tmp / "integration.log").read_text()
        unreachable = _logged(stack, "catalog.snapshot_unreachable")
    finally:
        _stop(catalog)

    # 4. Catalog down: Integration keeps serving with what it last applied
    _until(
        lambda: _logged(stack, "catalog.snapshot_unreachable") > unreachable,
        "catalog still reachable",
    )
    assert _deliver(stack, "hooked", "a") == 200
    assert _deliver(stack, "hand", "feed") == 200


def _replicas(stack: Stack) -> dict[str, int]:
    with stack.runtime_db.connect() as conn:
        rows = conn.execute(text("SELECT replica_id, prepared_revision FROM runtime_replica"))
        return {r.replica_id: int(r.prepared_revision) for r in rows}


def test_runtime_replicas_acknowledge_before_active(stack: Stack) -> None:
    second_base = free_port_base()
    env = {
        **stack.env,
        "NEXUS_PORT_BASE": str(second_base),
        "NEXUS_RUNTIME_REPLICA_ID": "replica-b",
    }
    with (stack.tmp / "runtime-b.log").open("a") as log:
        replica_b = subprocess.Popen(
            [*NEXUS, "serve", "--role=runtime-api"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        _wait_ready(f"http://127.0.0.1:{second_base + 1}", replica_b)
        _until(lambda: "replica-b" in _replicas(stack), "replica-b never reported")
        both = stack.apply(_package(stack.tmp / "h130", "1.3.0", ["a"]))
        assert both.returncode == 0, both.stderr
        assert "2 runtime-api replica(s) acknowledged" in both.stdout
        final = FINAL.search(both.stdout)
        assert final, both.stdout
        revision = int(final.group(1))
        assert _replicas(stack) == {"replica-a": revision, "replica-b": revision}

        replica_b.send_signal(signal.SIGSTOP)  # alive by its last heartbeat, but silent
        try:
            package = _package(stack.tmp / "h140", "1.4.0", ["a"])
            waiting = subprocess.Popen(  # a 1 s writer lease, renewed while the step waits
                [*NEXUS, "catalog", "apply", str(package)],
                env={**stack.env, "NEXUS_CATALOG_WRITER_LEASE_SECONDS": "1"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            _until(lambda: stack.org()["writer_job"] is not None, "no writer lease taken")
            time.sleep(2.5)
            assert stack.org()["writer_until_ms"] > time.time() * 1000  # still held
            stdout, stderr = waiting.communicate(timeout=120)
        finally:
            replica_b.send_signal(signal.SIGCONT)
        stuck = subprocess.CompletedProcess(waiting.args, waiting.returncode, stdout, stderr)
        assert stuck.returncode == 1
        assert "replica(s) replica-b did not acknowledge CatalogRevision" in stuck.stderr
        assert "nexus catalog resume" in stuck.stderr
        job = job_id_of(stuck.stdout)
        assert stack.steps(job)[-1] == "SNAPSHOT_PUBLISHED"  # not ACTIVE without replica-b
        assert stack.org()["active_revision"] == revision
        resumed = stack.nexus("catalog", "resume")
        assert resumed.returncode == 0, resumed.stderr
        assert stack.steps(job)[-2:] == ["RUNTIME_PREPARED", "ACTIVE"]
        assert set(_replicas(stack).values()) == {revision + 1}
    finally:
        _stop(replica_b)


def test_runtime_refuses_a_stale_fencing_token(stack: Stack) -> None:
    org = stack.org()
    deadline = {"x-nexus-deadline": str(int((time.time() + 30) * 1000))}
    signer = workload_signer(load_settings(var_dir=stack.tmp / "var"), "catalog")
    url = f"http://127.0.0.1:{stack.base + 1}/internal/v1/runtime/releases"

    def call(path: str, token: int) -> httpx.Response:
        body = {
            "org_id": org["org_id"],
            "catalog_revision": org["catalog_revision"],
            "fencing_token": token,
        }
        headers = {"x-nexus-workload": signer.token("runtime-api"), **deadline}
        return httpx.post(f"{url}/{path}", json=body, headers=headers, timeout=30)

    current = int(org["writer_token"])
    assert call("schema", current).status_code == 200  # the newest token may repeat
    for path in ("schema", "prepare"):
        stale = call(path, current - 1)
        assert stale.status_code == 409, stale.text
        assert stale.json()["code"] == "STALE_FENCING_TOKEN"
        assert f"fencing token {current - 1} is older than {current}" in stale.json()["message"]
