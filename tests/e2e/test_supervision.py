"""`nexus up` keeps a stack serving when one role dies: kill -9 of `integration` while a
provider sends signed webhooks. The role is back and ready within 10 s, the other roles
answer all along, every delivery the provider sent (retrying until acknowledged, as
providers do) becomes exactly one record, and the role's /metrics counts the restart."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from nexus.contracts.roles import ROLE_PORT_OFFSET, Role
from nexus.platform.standard_webhooks import signature_headers
from tests.conftest import Backend
from tests.e2e.test_stack import child_pids, clean_env, running_stack
from tests.e2e.test_webhooks import nexus, set_up_contacts_route, wait_for

pytestmark = pytest.mark.e2e
SECRET = "supervision-e2e-secret"  # a raw secret: its UTF-8 bytes are the HMAC key
DELIVERIES = 60
KILL_AFTER = 20
BACK_WITHIN_SECONDS = 10


def _role_pids(supervisor: int) -> dict[str, int]:
    pids = {}
    for pid in child_pids(supervisor):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        role = next(a.decode().split("=", 1)[1] for a in argv if a.startswith(b"--role="))
        pids[role] = pid
    return pids


class Watcher(threading.Thread):
    """Polls the roles that were not killed, directly on their ports, until stopped."""

    def __init__(self, ports: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.failures: list[str] = []
        self.polls = 0
        self.done = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=2, trust_env=False) as client:
            while not self.done.is_set():
                for role, port in self.ports.items():
                    try:
                        status = client.get(f"http://127.0.0.1:{port}/healthz").status_code
                    except httpx.HTTPError as exc:
                        self.failures.append(f"{role}: {type(exc).__name__}")
                        continue
                    if status != 200:
                        self.failures.append(f"{role}: {status}")
                self.polls += 1
                time.sleep(0.1)


def _deliver(client: httpx.Client, url: str, number: int) -> None:
    """Send one delivery until it is acknowledged."""
    body = json.dumps(
        {
            "type": "contact.created",
            "object": "contact",
            "data": {"id": f"s-{number:03d}", "last_name": f"Survivor {number}"},
        }
    ).encode()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        headers = signature_headers(
            SECRET.encode(), msg_id=f"sup-{number}", timestamp=int(time.time()), body=body
        )
        try:
            reply = client.post(url, content=body, headers=headers)
            if reply.is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"delivery {number} was never acknowledged")


def test_a_killed_role_comes_back_and_nothing_is_lost(tmp_path: Path, backend: Backend) -> None:
    with running_stack(tmp_path, backend, NEXUS_INTEGRATION_CATALOG_POLL_SECONDS="0.5") as (
        proc,
        base,
        _elapsed,
    ):
        env = clean_env(tmp_path, NEXUS_PORT_BASE=str(base))
        if backend.name == "mariadb":
            env.update(backend.env())
        set_up_contacts_route(env, tmp_path, secret=SECRET)

        pids = _role_pids(proc.pid)
        ports = {r.value: base + ROLE_PORT_OFFSET[r] for r in Role if r is not Role.INTEGRATION}
        watcher = Watcher(ports)
        watcher.start()
        integration = f"http://127.0.0.1:{base + ROLE_PORT_OFFSET[Role.INTEGRATION]}"
        hook = f"http://127.0.0.1:{base}/webhooks/crm-demo/contacts"
        with httpx.Client(timeout=10, trust_env=False) as client:
            for number in range(KILL_AFTER):
                _deliver(client, hook, number)
            os.kill(pids["integration"], signal.SIGKILL)
            killed_at = time.monotonic()
            sender = threading.Thread(
                target=lambda: [_deliver(client, hook, n) for n in range(KILL_AFTER, DELIVERIES)]
            )
            sender.start()
            back_after = None
            while time.monotonic() - killed_at < 30:
                try:
                    if client.get(f"{integration}/readyz", timeout=1).status_code == 200:
                        back_after = time.monotonic() - killed_at
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            sender.join(timeout=120)
            assert not sender.is_alive()
            metrics = client.get(f"{integration}/metrics").text
        watcher.done.set()
        watcher.join()

        assert back_after is not None, "integration was not restarted"
        assert back_after < BACK_WITHIN_SECONDS, f"ready again after {back_after:.1f} s"
        assert watcher.polls > 10
        assert watcher.failures == []  # the gateway, Runtime, Catalog, App never stopped
        assert 'nexus_role_restarts{role="integration"} 1.0' in metrics
        new_pids = _role_pids(proc.pid)
        assert new_pids["integration"] != pids["integration"]
        assert {r: p for r, p in new_pids.items() if r != "integration"} == {
            r: p for r, p in pids.items() if r != "integration"
        }

        def contacts() -> list[str]:
            soql = "SELECT External_Id__c FROM Contact ORDER BY External_Id__c"
            out = nexus(env, "query", soql, "--username", "admin")
            return [r["External_Id__c"] for r in json.loads(out)["records"]]

        expected = [f"s-{n:03d}" for n in range(DELIVERIES)]
        assert wait_for(lambda: contacts() == expected, timeout=120), contacts()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    restarted = [
        json.loads(line)
        for line in (tmp_path / "up.stderr").read_text().splitlines()
        if '"stack.role_restarted"' in line
    ]
    assert [(e["child"], e["restarts"]) for e in restarted] == [("integration", 1)]
