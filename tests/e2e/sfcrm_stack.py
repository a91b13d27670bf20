"""One `nexus up` stack for the Salesforce-dialect client suites: HTTPS gateway, the sfcrm
package's sales objects (applied as metadata too, so the suites do not depend on the install),
users with different access, and their tokens."""

from __future__ import annotations

import copy
import json
import os
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from nexus.apps import sfcrm
from nexus.platform.settings import TLS_PORT_OFFSET
from tests.conftest import Backend
from tests.e2e.test_stack import NEXUS, clean_env, running_stack

ADMIN_PASSWORD = "sfcrm-admin-password-1"
PASSWORD = "sfcrm-user-password-1"
VERSION = "59.0"

JSFORCE_DIR = Path(__file__).parent / "jsforce"
PACKAGE_OBJECTS = Path(sfcrm.__file__).parent / "package" / "components" / "objects.yaml"
SKILLS = {
    "api_name": "Skills__c",
    "label": "Skills",
    "type": "multi_picklist",
    "values": [{"value": "Python"}, {"value": "Go"}, {"value": "Rust"}],
}


def metadata() -> dict[str, Any]:
    """The sfcrm package's Account, Contact and Opportunity (what `nexus up` installs; applied
    unchanged when it did) plus what these tests add: a multi-picklist on Contact, a
    validation rule on Account, and permission sets for the test users."""
    package = yaml.safe_load(PACKAGE_OBJECTS.read_text())["components"]
    objects = {c["key"]: copy.deepcopy(c["definition"]) for c in package if c["kind"] == "object"}
    objects["Contact"]["fields"].append(SKILLS)
    names = ("Account", "Contact", "Opportunity")
    return {
        "objects": [objects[name] for name in names],
        "permission_sets": [
            {
                "api_name": "Sfcrm_Test_Sales",
                "label": "Sales (tests)",
                "objects": [
                    {
                        "object": name,
                        "create": True,
                        "read": True,
                        "edit": True,
                        "delete": True,
                        "all_fields": "edit",
                    }
                    for name in names
                ],
            },
            {
                "api_name": "Sfcrm_Test_Read_Only",
                "label": "Read Only (tests)",
                "objects": [{"object": name, "read": True, "all_fields": "read"} for name in names],
            },
        ],
        "validation_rules": [
            {
                "api_name": "Sfcrm_Test_No_Negative_Revenue",
                "object": "Account",
                "formula": "AnnualRevenue < 0",
                "error_message": "revenue cannot be negative",
                "error_field": "AnnualRevenue",
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
        (tmp_path / "sales.json").write_text(json.dumps(metadata()))
        stack.nexus("metadata", "apply", str(tmp_path / "sales.json"))
        users = (
            ("rep1", "Sfcrm_Test_Sales"),
            ("rep2", "Sfcrm_Test_Sales"),
            ("viewer", "Sfcrm_Test_Read_Only"),
            ("fuzzer", "Sfcrm_Test_Sales"),  # schemathesis: its records are private to it
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


def run_jsforce(stack: Stack, script: str, config: dict[str, Any]) -> dict[str, Any]:
    """Run `tests/e2e/jsforce/<script>` (jsforce as locked) against the stack with `config` on
    stdin; its last line of output is its JSON answer. The stack's CA is the only one added."""
    node = shutil.which("node")
    assert node is not None, "Node.js is required"
    if not (JSFORCE_DIR / "node_modules" / "jsforce").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=JSFORCE_DIR,
            check=True,
            timeout=300,
            capture_output=True,
        )
    done = subprocess.run(
        [node, str(JSFORCE_DIR / script)],
        input=json.dumps(config),
        env=dict(os.environ, NODE_EXTRA_CA_CERTS=str(stack.ca)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer
