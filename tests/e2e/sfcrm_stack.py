"""One `nexus up` stack for the Salesforce-dialect client suites: HTTPS gateway, the sales
objects (applied as metadata; fine if the sfcrm package already made them), users with
different access, and their tokens."""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from nexus.platform.settings import TLS_PORT_OFFSET
from tests.conftest import Backend
from tests.e2e.test_stack import NEXUS, clean_env, running_stack

ADMIN_PASSWORD = "sfcrm-admin-password-1"
PASSWORD = "sfcrm-user-password-1"
VERSION = "59.0"

METADATA = {
    "objects": [
        {
            "api_name": "Account",
            "label": "Account",
            "plural_label": "Accounts",
            "key_prefix": "001",
            "sharing_model": "Private",
            "name_field": {
                "api_name": "Name",
                "label": "Account Name",
                "type": "text",
                "length": 255,
            },
            "fields": [
                {
                    "api_name": "Ext_Id__c",
                    "label": "External Id",
                    "type": "text",
                    "length": 64,
                    "external_id": True,
                    "unique": True,
                },
                {"api_name": "Revenue__c", "label": "Revenue", "type": "currency"},
                {
                    "api_name": "Tier__c",
                    "label": "Tier",
                    "type": "picklist",
                    "values": [{"value": "Gold"}, {"value": "Silver"}],
                },
            ],
        },
        {
            "api_name": "Contact",
            "label": "Contact",
            "plural_label": "Contacts",
            "key_prefix": "003",
            "sharing_model": "Private",
            "name_field": {"api_name": "Name", "label": "Full Name", "type": "text", "length": 121},
            "fields": [
                {"api_name": "LastName", "label": "Last Name", "type": "text", "length": 80},
                {"api_name": "Email", "label": "Email", "type": "email"},
                {
                    "api_name": "AccountId",
                    "label": "Account",
                    "type": "lookup",
                    "reference_to": "Account",
                    "relationship_name": "Account",
                    "child_relationship_name": "Contacts",
                },
                {
                    "api_name": "Ext_Id__c",
                    "label": "External Id",
                    "type": "text",
                    "length": 64,
                    "external_id": True,
                    "unique": True,
                },
                {
                    "api_name": "Skills__c",
                    "label": "Skills",
                    "type": "multi_picklist",
                    "values": [{"value": "Python"}, {"value": "Go"}, {"value": "Rust"}],
                },
            ],
        },
    ],
    "permission_sets": [
        {
            "api_name": "Sfcrm_Sales",
            "label": "Sales",
            "objects": [
                {
                    "object": o,
                    "create": True,
                    "read": True,
                    "edit": True,
                    "delete": True,
                    "all_fields": "edit",
                }
                for o in ("Account", "Contact")
            ],
        },
        {
            "api_name": "Sfcrm_Read_Only",
            "label": "Read Only",
            "objects": [
                {"object": o, "read": True, "all_fields": "read"} for o in ("Account", "Contact")
            ],
        },
    ],
    "validation_rules": [
        {
            "api_name": "No_Negative_Revenue",
            "object": "Account",
            "formula": "Revenue__c < 0",
            "error_message": "revenue cannot be negative",
            "error_field": "Revenue__c",
        }
    ],
}


@dataclass
class Stack:
    base: int
    env: dict[str, str]
    ca: Path
    tokens: dict[str, str] = field(default_factory=dict)
    client_id: str = ""
    client_secret: str = ""

    @property
    def https(self) -> str:
        return f"https://127.0.0.1:{self.base + TLS_PORT_OFFSET}"

    def tls(self) -> ssl.SSLContext:
        """A client TLS context that trusts the stack's local CA (and nothing else)."""
        return ssl.create_default_context(cafile=str(self.ca))

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.base}"

    def nexus(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [*NEXUS, *args],
            check=False,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def token(self, username: str, password: str) -> str:
        reply = httpx.post(
            f"{self.https}/services/oauth2/token",
            data={"grant_type": "password", "username": username, "password": password},
            verify=self.tls(),
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["instance_url"] == self.https
        return str(reply.json()["access_token"])


@contextmanager
def sfcrm_stack(tmp_path: Path, backend: Backend, **extra_env: str) -> Iterator[Stack]:
    with running_stack(
        tmp_path,
        backend,
        https_issuer=True,
        NEXUS_BOOTSTRAP_ADMIN_PASSWORD=ADMIN_PASSWORD,
        **extra_env,
    ) as (_proc, base, _elapsed):
        env = clean_env(tmp_path, NEXUS_PORT_BASE=str(base), **extra_env)
        if backend.name == "mariadb":
            env.update(backend.env())
        stack = Stack(base=base, env=env, ca=tmp_path / "var" / "tls" / "ca.pem")
        (tmp_path / "sales.json").write_text(json.dumps(METADATA))
        stack.nexus("metadata", "apply", str(tmp_path / "sales.json"))
        users = (
            ("rep1", "Sfcrm_Sales"),
            ("rep2", "Sfcrm_Sales"),
            ("viewer", "Sfcrm_Read_Only"),
            ("fuzzer", "Sfcrm_Sales"),  # schemathesis: its records are private to it
        )

        def add_user(user: str, permission_set: str) -> None:
            stack.nexus(
                "admin",
                "create-user",
                "--username",
                user,
                "--password-stdin",
                stdin=PASSWORD + "\n",
            )
            stack.nexus(
                "admin",
                "assign-permission-set",
                "--username",
                user,
                "--permission-set",
                permission_set,
            )

        with ThreadPoolExecutor(max_workers=len(users)) as pool:  # one CLI process each
            list(pool.map(lambda pair: add_user(*pair), users))
        for user, _ in users:
            stack.tokens[user] = stack.token(user, PASSWORD)
        stack.tokens["admin"] = stack.token("admin", ADMIN_PASSWORD)
        out = stack.nexus(
            "admin",
            "create-client",
            "--name",
            "jsforce",
            "--grant-type",
            "password",
            "--scope",
            "api",
            "--scope",
            "refresh_token",
        )
        lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        stack.client_id = lines["client_id"].strip()
        stack.client_secret = lines["client_secret"].split()[0]
        yield stack
