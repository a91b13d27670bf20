"""A signed test webhook through `nexus up` and the gateway, as the README tells it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_stack import NEXUS, clean_env, running_stack

pytestmark = pytest.mark.e2e

ROUTES = """\
org_id: 00D000000000001AAA
routes:
  - connector: crm-demo
    route: contacts
    signature: {scheme: standard_webhooks}
    secrets: [crm-demo-contacts]
    event_kind: {pointer: /type}
    command:
      op: upsert
      object: Contact
      external_id_field: External_Id__c
      fields: {External_Id__c: /data/id, LastName: /data/last_name}
"""


def nexus(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*NEXUS, *args],
        check=False,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hooks_send_is_received_through_the_gateway(tmp_path: Path) -> None:
    with running_stack(tmp_path) as (_proc, base, _elapsed):
        env = clean_env(tmp_path, NEXUS_PORT_BASE=str(base))
        (tmp_path / "routes.yaml").write_text(ROUTES)
        (tmp_path / "event.json").write_text('{"type": "contact.created", "data": {"id": "1"}}')
        nexus(env, "hooks", "set-secret", "crm-demo-contacts", "--generate")
        applied = nexus(env, "integration", "apply-routes", str(tmp_path / "routes.yaml"))
        assert "crm-demo/contacts: version 1 (changed)" in applied
        send = ["hooks", "send", "--connector", "crm-demo", "--route", "contacts"]
        first = nexus(env, *send, "--delivery-id", "demo-1", str(tmp_path / "event.json"))
        again = nexus(env, *send, "--delivery-id", "demo-1", str(tmp_path / "event.json"))
    assert "status: 200" in first
    assert "duplicate: false" in first
    receipt = next(line for line in first.splitlines() if line.startswith("receipt_id: "))
    assert receipt in again
    assert "duplicate: true" in again
