"""A Runtime database ready for AcceptCommand, a served runtime-api, real runtime-worker
processes, and the helpers the command tests share."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.identity.repository import IdentityRepository
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, reading, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets, workload_signer
from nexus.platform.settings import Settings, load_settings
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.app import create_api_app
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.bindings import INTEGRATION_USERNAME, bootstrap_integration_binding
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.records import models as records_tables
from tests.conftest import Backend
from tests.support.servers import serving

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = "/internal/v1/runtime/commands"
ADMIN_PASSWORD = "admin-password-for-tests-1"
FINAL = ("succeeded", "dead", "outcome_unknown", "cancelled")

CONTACTS = {
    "objects": [
        {
            "api_name": "Contact",
            "label": "Contact",
            "plural_label": "Contacts",
            "key_prefix": "003",
            "sharing_model": "Private",
            "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
            "fields": [
                {
                    "api_name": "LastName",
                    "label": "Last Name",
                    "type": "text",
                    "length": 80,
                    "required": True,
                    "track_history": True,
                },
                {"api_name": "Email", "label": "Email", "type": "email"},
                {
                    "api_name": "External_Id__c",
                    "label": "External Id",
                    "type": "text",
                    "length": 64,
                    "external_id": True,
                    "unique": True,
                },
                {"api_name": "Phone", "label": "Phone", "type": "phone"},
                {
                    "api_name": "Badge__c",
                    "label": "Badge",
                    "type": "number",
                    "precision": 10,
                    "scale": 0,
                    "external_id": True,
                    "unique": True,
                },
            ],
        },
        {
            "api_name": "Payroll__c",
            "label": "Payroll",
            "plural_label": "Payrolls",
            "key_prefix": "a09",
            "sharing_model": "Private",
            "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
            "fields": [
                {
                    "api_name": "Payroll_Ref__c",
                    "label": "Reference",
                    "type": "text",
                    "length": 64,
                    "external_id": True,
                    "unique": True,
                }
            ],
        },
    ],
    "permission_sets": [
        {
            "api_name": "Integration_Contacts",
            "label": "Integration: contacts",
            "objects": [
                {
                    "object": "Contact",
                    "create": True,
                    "read": True,
                    "edit": True,
                    "delete": True,
                    "all_fields": "edit",
                }
            ],
        }
    ],
    "validation_rules": [
        {
            "api_name": "No_Test_Domain",
            "object": "Contact",
            "formula": "CONTAINS(Email, 'invalid.example')",
            "error_message": "addresses at invalid.example are refused",
            "error_field": "Email",
        }
    ],
    "flows": [
        {
            "api_name": "Contact_Name",
            "object": "Contact",
            "updates": [{"field": "Name", "formula": "'Contact ' & LastName"}],
        }
    ],
}


@dataclass
class RuntimeDb:
    """A migrated Runtime database with an org, an admin, the `integration` user bound to
    the `integration` workload and holding `Integration_Contacts`, and the Contact object."""

    url: str
    engine: AsyncEngine
    org_id: str
    integration_user_id: str
    var_dir: Path
    settings: Settings


async def prepare_runtime(backend: Backend, var_dir: Path) -> RuntimeDb:
    url = backend.url(LogicalService.RUNTIME)
    engine = create_engine(url, application_name="nexus-test")
    try:
        return await _prepare(engine, url, var_dir)
    except BaseException:
        await engine.dispose()
        raise


async def _prepare(engine: AsyncEngine, url: str, var_dir: Path) -> RuntimeDb:
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    await bootstrap_first_admin(sessions, password=ADMIN_PASSWORD)
    await bootstrap_integration_binding(sessions)
    async with unit_of_work(sessions, readonly=True) as session:
        repo = IdentityRepository(session)
        org = await repo.first_org()
        user = await repo.user_by_username(INTEGRATION_USERNAME)
    assert org is not None
    assert user is not None
    await apply_metadata(engine, org_id=org["org_id"], raw=CONTACTS)
    async with unit_of_work(sessions) as session:
        await assign_permission_set(
            session,
            org_id=org["org_id"],
            user_id=user["user_id"],
            permission_set="Integration_Contacts",
        )
    ensure_local_secrets(var_dir, ["integration", "app-sfcrm", "catalog"])
    settings = load_settings(
        var_dir=var_dir, runtime_database_url=url, public_base_url="http://testserver.nexus"
    )
    return RuntimeDb(url, engine, org["org_id"], user["user_id"], var_dir, settings)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def db(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RuntimeDb]:
    """A module's prepared Runtime database (import this fixture into the test module)."""
    prepared = await prepare_runtime(backend, tmp_path_factory.mktemp("runtime-var"))
    yield prepared
    await prepared.engine.dispose()


@asynccontextmanager
async def runtime_api(db: RuntimeDb, **overrides: Any) -> AsyncIterator[str]:
    """runtime-api on a real loopback socket (in this process); yields its URL."""
    settings = load_settings(
        var_dir=db.var_dir,
        runtime_database_url=db.url,
        public_base_url="http://testserver.nexus",
        **overrides,
    )
    async with serving(create_api_app(settings)) as url:
        yield url


def deadline_ms(seconds: float = 10) -> int:
    return int((time.time() + seconds) * 1000)


def headers(db: RuntimeDb, workload: str = "integration", org: str | None = None) -> dict[str, str]:
    """A workload call's headers, its token signed for `org` (the test org by default)."""
    return workload_signer(db.settings, workload).headers(
        "runtime-api", deadline_ms=deadline_ms(), org=org or db.org_id
    )


def command(
    external_id: str,
    op: str = "upsert",
    *,
    object_name: str = "Contact",
    external_id_field: str = "External_Id__c",
    **fields: Any,
) -> dict[str, Any]:
    return {
        "op": op,
        "object": object_name,
        "external_id_field": external_id_field,
        "external_id": external_id,
        "fields": fields,
    }


async def send(
    client: httpx.AsyncClient,
    db: RuntimeDb,
    body: dict[str, Any],
    *,
    message_id: str | None = None,
    workload: str = "integration",
    org_id: str | None = None,
) -> httpx.Response:
    return await client.post(
        COMMANDS,
        json={
            "org_id": org_id or db.org_id,
            "message_id": message_id or uuid.uuid4().hex,
            "command": body,
            "correlation": {"event_id": "evt-1"},
        },
        headers=headers(db, workload, org_id),
    )


async def accepted(client: httpx.AsyncClient, db: RuntimeDb, body: dict[str, Any]) -> str:
    reply = await send(client, db, body)
    assert reply.status_code == 202, reply.text
    return str(reply.json()["work_id"])


async def item(engine: AsyncEngine, work_id: str) -> dict[str, Any]:
    items = inbox_tables.inbox.items
    async with reading(engine) as conn:
        row = (await conn.execute(select(items).where(items.c.id == work_id))).mappings().one()
    return dict(row)


async def wait_final(engine: AsyncEngine, work_ids: list[str], within: float = 60) -> None:
    items = inbox_tables.inbox.items
    deadline = time.monotonic() + within
    done = 0
    while time.monotonic() < deadline:
        async with reading(engine) as conn:
            done = (
                await conn.execute(
                    select(func.count()).where(items.c.id.in_(work_ids), items.c.state.in_(FINAL))
                )
            ).scalar_one()
        if done == len(set(work_ids)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {done} of {len(set(work_ids))} commands finished")


async def contact(db: RuntimeDb, external_id: str) -> dict[str, Any] | None:
    """The Contact row holding this external id (deleted ones too), as stored."""
    async with unit_of_work(session_factory(db.engine), readonly=True) as session:
        view = await MetadataCache().view(session, db.org_id)
        obj = view.object("Contact")
        assert obj is not None
        table = view.table(obj)
        row = (
            (await session.execute(select(table).where(table.c.external_id__c == external_id)))
            .mappings()
            .first()
        )
    return dict(row) if row else None


async def history(db: RuntimeDb, record_id: str) -> list[tuple[str, str | None, str | None]]:
    t = records_tables.field_history
    async with reading(db.engine) as conn:
        rows = await conn.execute(
            select(t.c.field_name, t.c.old_value, t.c.new_value)
            .where(t.c.org_id == db.org_id, t.c.record_id == record_id)
            .order_by(t.c.changed_at_ms, t.c.history_id)
        )
    return [(r[0], r[1], r[2]) for r in rows]


# ---------------------------------------------------------------------------- worker processes


def process_state(pid: int) -> str:
    """A process's state letter from `/proc/<pid>/stat` (`T`: stopped, `Z`: killed, not yet
    reaped), or "gone"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat.rpartition(")")[2].split()[0]  # after the command name, which may hold spaces


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class WorkerProcess:
    process: subprocess.Popen[str]
    url: str
    log: Path


def start_worker(db: RuntimeDb, log: Path, **env: str) -> WorkerProcess:
    """`nexus serve --role=runtime-worker` on the test database; returns once it is ready."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    environment.update(
        NEXUS_VAR_DIR=str(db.var_dir),
        NEXUS_RUNTIME_DATABASE_URL=db.url,
        NEXUS_LOG_FORMAT="json",
        PYTHONPATH=str(ROOT),
        **env,
    )
    handle = log.open("a")
    process = subprocess.Popen(
        [sys.executable, "-m", "nexus", "serve", "--role=runtime-worker", f"--port={port}"],
        cwd=ROOT,
        env=environment,
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
    )
    handle.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, f"runtime-worker exited: {log.read_text()[-2000:]}"
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return WorkerProcess(process, url, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("runtime-worker did not become ready")


def stop_worker(worker: WorkerProcess, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    if worker.process.poll() is None:
        worker.process.send_signal(sig)
    return worker.process.wait(timeout=timeout)
