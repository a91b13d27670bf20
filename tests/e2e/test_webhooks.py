"""A signed webhook becomes a record, through `nexus up` and the gateway, as the README tells it:
(sfcrm's Contact) -> permission set for the integration user -> secret -> route -> `hooks send` ->
receipt -> event and WorkItem -> Runtime AcceptCommand -> runtime-worker -> the record."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tests.e2e.test_stack import NEXUS, clean_env, running_stack

pytestmark = pytest.mark.e2e

CONTACTS = """\
# Contact (with External_Id__c, and Name derived from the name parts) comes with sfcrm
permission_sets:
  - {api_name: Integration_Contacts, label: "Integration: contacts",
     objects: [{object: Contact, create: true, read: true, edit: true, all_fields: edit}]}
validation_rules:
  - {api_name: No_Test_Names, object: Contact, formula: "LastName = 'Refused'",
     error_message: "not a real name", error_field: LastName}
"""

ROUTES = """\
routes:
  - connector: crm-demo
    route: contacts
    signature: {scheme: standard_webhooks}
    secrets: [crm-demo-contacts]
    event_kind: {pointer: /type}
    source: {object_kind: {pointer: /object}, object_id: {pointer: /data/id}}
    command:
      op: upsert
      object: Contact
      external_id_field: External_Id__c
      fields: {External_Id__c: /data/id, LastName: /data/last_name}
"""


def nexus(
    env: dict[str, str],
    *args: str,
    stdin: str | None = None,
    command: Sequence[str] = tuple(NEXUS),
    cwd: Path | None = None,
) -> str:
    """`nexus ARGS` (or `command ARGS`, an installed wheel's CLI) in `cwd`; its stdout."""
    done = subprocess.run(
        [*command, *args],
        check=False,
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def set_up_contacts_route(
    env: dict[str, str],
    folder: Path,
    *,
    secret: str | None = None,
    command: Sequence[str] = tuple(NEXUS),
    cwd: Path | None = None,
) -> str:
    """As the README tells it: Contact access for the integration user, the route's secret
    (`secret`, or a generated one), the crm-demo/contacts route; what apply-routes printed."""
    for name, text in (("contacts.yaml", CONTACTS), ("routes.yaml", ROUTES)):
        (folder / name).write_text(text)

    def run(*args: str, stdin: str | None = None) -> str:
        return nexus(env, *args, stdin=stdin, command=command, cwd=cwd)

    run("metadata", "apply", str(folder / "contacts.yaml"))
    grant = ["--username", "integration", "--permission-set", "Integration_Contacts"]
    run("admin", "assign-permission-set", *grant)
    if secret is None:
        run("hooks", "set-secret", "crm-demo-contacts", "--generate")
    else:
        run("hooks", "set-secret", "crm-demo-contacts", stdin=secret + "\n")
    return run("integration", "apply-routes", str(folder / "routes.yaml"))


def contacts(env: dict[str, str]) -> list[dict[str, Any]]:
    out = nexus(
        env,
        "query",
        "SELECT LastName, External_Id__c FROM Contact ORDER BY External_Id__c",
        "--username",
        "admin",
    )
    return [
        {"LastName": r["LastName"], "External_Id__c": r["External_Id__c"]}
        for r in json.loads(out)["records"]
    ]


def wait_for(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def test_a_signed_webhook_becomes_a_record_once(tmp_path: Path, backend: Backend) -> None:
    with running_stack(tmp_path, backend) as (_proc, base, _elapsed):
        env = clean_env(tmp_path, NEXUS_PORT_BASE=str(base))
        if backend.name == "mariadb":
            env.update(backend.env())
        applied = set_up_contacts_route(env, tmp_path)
        assert "crm-demo/contacts: version 1 (changed)" in applied

        def send(delivery: str, body: dict[str, Any]) -> str:
            path = tmp_path / f"{delivery}.json"
            path.write_text(json.dumps(body))
            send = ["hooks", "send", "--connector", "crm-demo", "--route", "contacts"]
            return nexus(env, *send, "--delivery-id", delivery, str(path))

        created = {
            "type": "contact.created",
            "object": "contact",
            "data": {"id": "42", "last_name": "Lovelace"},
        }
        first = send("demo-1", created)
        again = send("demo-1", created)  # the provider retries: one receipt, one record
        assert "status: 200" in first
        assert "duplicate: false" in first
        assert "duplicate: true" in again
        assert wait_for(lambda: contacts(env)) == [{"LastName": "Lovelace", "External_Id__c": "42"}]

        send(
            "demo-2",
            {
                "type": "contact.updated",
                "object": "contact",
                "data": {"id": "42", "last_name": "Byron"},
            },
        )
        send(
            "demo-3",
            {
                "type": "contact.created",
                "object": "contact",
                "data": {"id": "43", "last_name": "Refused"},
            },
        )  # a validation refusal
        send(
            "demo-4",
            {
                "type": "contact.created",
                "object": "contact",
                "data": {"id": "44", "last_name": "Hopper"},
            },
        )
        expected = [
            {"LastName": "Byron", "External_Id__c": "42"},
            {"LastName": "Hopper", "External_Id__c": "44"},
        ]
        assert wait_for(lambda: contacts(env) == expected), contacts(env)

        # the refused command is a dead letter in Runtime's inbox (sanitized: no values);
        # Integration's WorkItems all succeeded (Runtime accepted each command once)
        def dead_lines() -> list[str]:
            out = nexus(env, "work", "stats", "--all")
            return [line for line in out.splitlines() if " dead " in f" {line} "]

        dead = wait_for(lambda: [line for line in dead_lines() if line.split()[-1] != "0"])
        assert len(dead) == 1, dead_lines()
        queue, family = dead[0].split()[:2]
        assert (queue, family.partition("/")[2]) == ("inbox", "runtime.inbox")  # <org>/...
        assert dead[0].split()[-1] == "1"
        stats = nexus(env, "work", "stats", "--all")
        assert "Refused" not in stats
    assert contacts(env) == expected  # nothing applied twice after the stack stopped either
