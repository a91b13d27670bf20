"""After-save flows end to end: real runtime-api and runtime-worker processes, a real
webhook receiver process that verifies Standard Webhooks signatures on its own, and the
operator CLI; both backends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.identity import admin as identity_admin
from nexus.identity.repository import IdentityRepository
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, reading, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets, workload_signer
from nexus.platform.settings import load_settings
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.outbox import models as outbox_tables
from nexus.runtime.outbox.bindings import set_endpoint
from tests.conftest import Backend

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]
ROOT = Path(__file__).resolve().parents[2]
NEXUS = [sys.executable, "-m", "nexus"]
API = "/internal/v1/runtime"
ALICE_PASSWORD = "alice-password-for-flows-1"
ADMIN_PASSWORD = "admin-password-for-flows-1"
MAX_ATTEMPTS = 4
T = TypeVar("T")

TEXT = {"api_name": "Name", "label": "Name", "type": "text", "length": 120}
METADATA: dict[str, Any] = {
    "objects": [
        {
            "api_name": "Account",
            "label": "Account",
            "plural_label": "Accounts",
            "key_prefix": "001",
            "sharing_model": "Private",
            "name_field": TEXT,
            "fields": [
                {"api_name": "Hook__c", "label": "Hook", "type": "text", "length": 20},
                {"api_name": "Revenue__c", "label": "Revenue", "type": "number"},
                {"api_name": "Last_Task__c", "label": "Last task", "type": "text", "length": 120},
            ],
        },
        {
            "api_name": "Task",
            "label": "Task",
            "plural_label": "Tasks",
            "key_prefix": "00T",
            "sharing_model": "Private",
            "name_field": {**TEXT, "label": "Subject"},
            "fields": [
                {
                    "api_name": "WhatId",
                    "label": "Related to",
                    "type": "lookup",
                    "reference_to": "Account",
                    "relationship_name": "What",
                }
            ],
        },
    ],
    "permission_sets": [
        {
            "api_name": "Desk",
            "label": "Desk",
            "objects": [
                {"object": "Account", "create": True, "read": True, "edit": True},
                {"object": "Task", "create": True, "read": True, "edit": True},
            ],
            "fields": [  # Last_Task__c: alice may read it, only the flow writes it
                {"field": "Account.Hook__c", "read": True, "edit": True},
                {"field": "Account.Revenue__c", "read": True, "edit": True},
                {"field": "Account.Last_Task__c", "read": True},
                {"field": "Task.WhatId", "read": True, "edit": True},
            ],
        }
    ],
    "validation_rules": [
        {
            "api_name": "No_Negative_Revenue",
            "object": "Account",
            "formula": "Revenue__c < 0",
            "error_message": "revenue cannot be negative",
        }
    ],
    "flows": [
        {
            "api_name": "Follow_Up",
            "object": "Account",
            "when": "after_save",
            "trigger": "create",
            "entry_condition": "ISBLANK(Hook__c)",
            "after_save": [
                {
                    "kind": "create_record",
                    "object": "Task",
                    "fields": {"Name": "'Follow up: ' & Name", "WhatId": "Id"},
                }
            ],
        },
        {
            "api_name": "Task_Marks_Account",
            "object": "Task",
            "when": "after_save",
            "trigger": "create",
            "after_save": [
                {"kind": "update_record", "lookup": "WhatId", "fields": {"Last_Task__c": "Name"}}
            ],
        },
        *(
            {
                "api_name": f"Hook_{name.capitalize()}",
                "object": "Account",
                "when": "after_save",
                "entry_condition": f"Hook__c = '{name}'",
                "after_save": [
                    {
                        "kind": "webhook",
                        "endpoint": f"{name}-hook",
                        "event": "account.saved",
                        "payload": {"id": "Id", "name": "Name", "revenue": "Revenue__c"},
                    }
                ],
            }
            for name in ("ok", "flaky", "down", "spare")
        ),
    ],
}


@dataclass
class Stack:
    engine: AsyncEngine
    api: str
    headers: dict[str, str]
    receiver: str
    secret: str
    alice_id: str
    logs: Path
    env: dict[str, str]

    async def mutate(self, *items: dict[str, Any], all_or_none: bool = False) -> Any:
        async with httpx.AsyncClient(base_url=self.api, timeout=20) as client:
            reply = await client.post(
                f"{API}/records/mutate",
                headers=self.headers,
                json={"items": list(items), "all_or_none": all_or_none},
            )
        assert reply.status_code == 200, reply.text
        return reply.json()["results"]

    async def query(self, soql: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self.api, timeout=20) as client:
            reply = await client.post(f"{API}/query", headers=self.headers, json={"soql": soql})
        assert reply.status_code == 200, reply.text
        return list(reply.json()["records"])

    async def items(self, record_id: str | None = None) -> list[dict[str, Any]]:
        items = outbox_tables.outbox.items
        async with reading(self.engine) as conn:
            rows = (
                await conn.execute(
                    select(
                        items.c.id,
                        items.c.state,
                        items.c.attempt,
                        items.c.failure_class,
                        items.c.last_error,
                        items.c.payload,
                    ).order_by(items.c.id)
                )
            ).all()
        found = [
            {
                "id": r[0],
                "state": r[1],
                "attempt": r[2],
                "failure_class": r[3],
                "last_error": r[4],
                **json.loads(r[5]),
            }
            for r in rows
        ]
        return [i for i in found if record_id is None or i["record_id"] == record_id]

    def received(self) -> list[dict[str, Any]]:
        return list(httpx.get(f"{self.receiver}/log", timeout=5).json())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_nexus(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NEXUS, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def nexus(env: dict[str, str], *args: str) -> str:
    done = run_nexus(env, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def receiver_process(secret: str, env: dict[str, str]) -> Iterator[str]:
    """The webhook receiver on a free port; yields its base URL."""
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.webhook_receiver", secret],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    ) as receiver:
        try:
            assert receiver.stdout is not None
            yield f"http://127.0.0.1:{receiver.stdout.readline().split()[1]}"
        finally:
            receiver.kill()


@contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[str]]:
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def eventually(check: Callable[[], Awaitable[T | None]], within: float = 45) -> T:
    deadline = time.monotonic() + within
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def wait_ready(url: str) -> None:
    async def ready() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(f"{url}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    await eventually(ready, within=60)


async def delegated_headers(
    var_dir: Path, api: str, username: str, password: str
) -> dict[str, str]:
    signer = workload_signer(load_settings(var_dir=var_dir), "app-sfcrm")
    deadline = int((time.time() + 600) * 1000)
    async with httpx.AsyncClient(base_url=api, timeout=20) as client:
        token = await client.post(
            "/services/oauth2/token",
            data={"grant_type": "password", "username": username, "password": password},
        )
        assert token.status_code == 200, token.text
        exchanged = await client.post(
            "/internal/v1/identity/exchange",
            json={"credential": token.json()["access_token"]},
            headers=signer.headers("runtime-api", deadline_ms=deadline),
        )
    return signer.headers(
        "runtime-api", deadline_ms=deadline, delegation=exchanged.json()["delegation"]
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("flows")
    var_dir = tmp / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        backend.env(),
        NEXUS_VAR_DIR=str(var_dir),
        NEXUS_LOG_FORMAT="json",
        NEXUS_OUTBOX_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
        NEXUS_OUTBOX_BACKOFF_BASE_MS="150",
        NEXUS_OUTBOX_BACKOFF_CAP_MS="600",
        NEXUS_OUTBOX_WEBHOOK_TIMEOUT_SECONDS="3",
        PYTHONPATH=str(ROOT),
    )
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="flows-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    await bootstrap_first_admin(sessions, password=ADMIN_PASSWORD)
    alice = await identity_admin.create_user(
        sessions,
        username="alice@flows.test",
        password=ALICE_PASSWORD,
        email="alice@flows.test",
        display_name="Alice",
        is_admin=False,
    )
    async with unit_of_work(sessions, readonly=True) as session:
        org_id = str((await IdentityRepository(session).first_org())["org_id"])
    await apply_metadata(engine, org_id=org_id, raw=METADATA)
    async with unit_of_work(sessions) as session:
        await assign_permission_set(
            session, org_id=org_id, user_id=alice.user_id, permission_set="Desk"
        )
    ensure_local_secrets(var_dir, ["app-sfcrm"])

    generated = nexus(env, "hooks", "set-secret", "flows-hook", "--generate")
    secret = next(line.split()[1] for line in generated.splitlines() if line.startswith("secret:"))
    with receiver_process(secret, env) as receiver_url:
        async for stack in _serving(
            engine,
            env=env,
            var_dir=var_dir,
            tmp=tmp,
            receiver_url=receiver_url,
            secret=secret,
            alice_id=alice.user_id,
            org_id=org_id,
        ):
            yield stack
    await engine.dispose()


async def _serving(
    engine: AsyncEngine,
    *,
    env: dict[str, str],
    var_dir: Path,
    tmp: Path,
    receiver_url: str,
    secret: str,
    alice_id: str,
    org_id: str,
) -> AsyncIterator[Stack]:
    """Endpoints bound with the CLI, then runtime-api and runtime-worker processes."""
    bound = nexus(
        env,
        "admin",
        "set-outbound-endpoint",
        "spare-hook",
        f"{receiver_url}/ok",
        "--secret-ref",
        "flows-hook",
    )
    assert "outbound endpoint spare-hook: created (active)" in bound
    async with engine.begin() as conn:  # the others in-process: each CLI run costs seconds
        for name in ("ok", "flaky", "down"):
            await set_endpoint(
                conn,
                org_id=org_id,
                name=f"{name}-hook",
                url=f"{receiver_url}/{name}",
                secret_ref="flows-hook",
                actor="test",
            )
    assert "disabled" in nexus(env, "admin", "disable-outbound-endpoint", "spare-hook")

    api_port, worker_port = free_port(), free_port()
    logs = tmp / "worker.log"
    serve = [*NEXUS, "serve", "--host", "127.0.0.1"]
    with (
        process([*serve, "--role=runtime-api", f"--port={api_port}"], env, tmp / "api.log"),
        process([*serve, "--role=runtime-worker", f"--port={worker_port}"], env, logs),
    ):
        api = f"http://127.0.0.1:{api_port}"
        await wait_ready(api)
        await wait_ready(f"http://127.0.0.1:{worker_port}")
        yield Stack(
            engine=engine,
            api=api,
            headers=await delegated_headers(var_dir, api, "alice@flows.test", ALICE_PASSWORD),
            receiver=receiver_url,
            secret=secret,
            alice_id=alice_id,
            logs=logs,
            env=env,
        )


def account(name: str, **fields: Any) -> dict[str, Any]:
    return {"op": "create", "object": "Account", "fields": {"Name": name, **fields}}


async def settled(stack: Stack, record_id: str, count: int) -> list[dict[str, Any]]:
    """The record's outbox items once `count` of them are terminal."""

    async def done() -> list[dict[str, Any]] | None:
        items = await stack.items(record_id)
        final = [i for i in items if i["state"] in ("succeeded", "dead")]
        return items if len(final) >= count else None

    return await eventually(done)


async def test_flows_create_a_related_record_and_update_a_parent_once_each(stack: Stack) -> None:
    [made] = await stack.mutate(account("Acme"))
    acme = made["id"]
    [follow_up] = await settled(stack, acme, 1)
    assert (follow_up["kind"], follow_up["state"], follow_up["attempt"]) == (
        "create_record",
        "succeeded",
        1,
    )
    tasks = await stack.query(
        f"SELECT Id, Name, OwnerId, CreatedById FROM Task WHERE WhatId = '{acme}'"
    )
    assert [(t["Name"], t["OwnerId"], t["CreatedById"]) for t in tasks] == [
        ("Follow up: Acme", stack.alice_id, stack.alice_id)  # attributed to the saver
    ]
    # the Task the flow created triggered no after-save flow of its own (one level)
    assert await stack.items(tasks[0]["Id"]) == []

    [call] = await stack.mutate(
        {"op": "create", "object": "Task", "fields": {"Name": "Call Bob", "WhatId": acme}}
    )
    [update] = await settled(stack, call["id"], 1)
    assert (update["kind"], update["state"], update["attempt"]) == ("update_record", "succeeded", 1)
    [parent] = await stack.query(
        f"SELECT Last_Task__c, LastModifiedById FROM Account WHERE Id = '{acme}'"
    )
    # alice cannot edit Last_Task__c herself: the action ran in system context, as her
    assert parent["Last_Task__c"] == "Call Bob"
    assert parent["LastModifiedById"] == stack.alice_id
    refused = await stack.mutate(
        {"op": "update", "id": acme, "fields": {"Last_Task__c": "by hand"}}
    )
    assert refused[0]["errors"][0]["category"] == "INVALID_FIELD"
    tasks = await stack.query(f"SELECT Name FROM Task WHERE WhatId = '{acme}'")
    assert sorted(t["Name"] for t in tasks) == ["Call Bob", "Follow up: Acme"]  # once each


async def test_a_webhook_is_delivered_signed_and_verifiable(stack: Stack) -> None:
    [made] = await stack.mutate(account("Hooked", Hook__c="ok", Revenue__c=42))
    [item] = await settled(stack, made["id"], 1)
    assert (item["state"], item["attempt"]) == ("succeeded", 1)
    deliveries = [d for d in stack.received() if d["id"] == item["id"]]
    assert len(deliveries) == 1
    [delivery] = deliveries
    assert delivery["verified"] is True  # checked by the receiver's own HMAC code
    assert delivery["path"] == "/ok"
    assert delivery["content_type"] == "application/json"
    assert delivery["body"]["type"] == "account.saved"
    assert delivery["body"]["data"] == {"id": made["id"], "name": "Hooked", "revenue": 42}


async def test_a_flaky_receiver_gets_the_webhook_once_after_retries(stack: Stack) -> None:
    [made] = await stack.mutate(account("Flaky", Hook__c="flaky"))
    [item] = await settled(stack, made["id"], 1)
    assert (item["state"], item["attempt"]) == ("succeeded", 3)
    deliveries = [d for d in stack.received() if d["id"] == item["id"]]
    assert [d["status"] for d in deliveries] == [503, 503, 200]  # one id: the receiver dedupes
    assert all(d["verified"] for d in deliveries)
    assert deliveries[0]["body"] == deliveries[2]["body"]


async def test_a_failing_receiver_ends_dead_with_a_sanitized_error(stack: Stack) -> None:
    [made] = await stack.mutate(account("Down", Hook__c="down"))
    [item] = await settled(stack, made["id"], 1)
    assert (item["state"], item["attempt"]) == ("dead", MAX_ATTEMPTS)
    assert item["failure_class"] == "retryable"
    assert item["last_error"] == "endpoint 'down-hook' answered HTTP 500"
    assert len([d for d in stack.received() if d["id"] == item["id"]]) == MAX_ATTEMPTS
    [spare] = await stack.mutate(account("Spare", Hook__c="spare"))  # endpoint disabled
    [parked] = await settled(stack, spare["id"], 1)
    assert (parked["state"], parked["attempt"], parked["failure_class"]) == ("dead", 1, "terminal")
    assert parked["last_error"] == "no active outbound endpoint 'spare-hook'"
    logged = stack.logs.read_text()
    assert "down-hook" in logged
    for secret_or_data in (stack.secret, stack.receiver, '"Down"'):
        assert secret_or_data not in logged


async def test_a_rolled_back_mutation_enqueues_nothing(stack: Stack) -> None:
    before = await stack.items()
    [refused] = await stack.mutate(account("Negative", Hook__c="ok", Revenue__c=-1))
    assert refused["errors"][0]["category"] == "VALIDATION_RULE"
    batch = await stack.mutate(
        account("Fine", Hook__c="ok"), account("Negative", Revenue__c=-5), all_or_none=True
    )
    assert [r["success"] for r in batch] == [False, False]
    await asyncio.sleep(0.5)
    assert len(await stack.items()) == len(before)
    assert not [d for d in stack.received() if d["body"]["data"]["name"] in ("Fine", "Negative")]


async def test_operators_list_endpoints_without_secrets(stack: Stack) -> None:
    listed = nexus(stack.env, "admin", "list-outbound-endpoints")
    lines = {line.split()[0]: line for line in listed.splitlines()}
    assert set(lines) == {"down-hook", "flaky-hook", "ok-hook", "spare-hook"}
    assert "disabled" in lines["spare-hook"]
    assert "active" in lines["ok-hook"]
    assert "secret:flows-hook" in lines["ok-hook"]
    assert stack.secret not in listed
    refused = run_nexus(
        stack.env, "admin", "set-outbound-endpoint", "x", "ftp://host/", "--secret-ref", "s"
    )
    assert refused.returncode == 1
    assert "http:// or https://" in refused.stderr
