"""What users install: the built wheel in a fresh virtualenv (not editable, from the hashed
runtime lock), run as `<venv>/bin/nexus up` from a directory outside the source tree.

A sales user's first minutes: sign in, create an Account, a SOQL query with a parent path, a
SOSL search, a list view, the browser bundle at `/`, and a signed webhook that becomes a
record. Each opens a data file a source checkout has beside the code (grammar, migrations,
package YAML, route tables, the browser build): here only the wheel's copies exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Backend
from tests.e2e.test_stack import clean_env, running_stack
from tests.e2e.test_webhooks import nexus as nexus_cli
from tests.e2e.test_webhooks import set_up_contacts_route

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
API = "/services/data/v62.0"
INSTALL_TIMEOUT_SECONDS = 600
ADMIN_PASSWORD = "wheel-smoke-Passw0rd!"


def _run(argv: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
        check=False,
        **options,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def installed_nexus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`bin/nexus` of a fresh venv holding the wheel built from this checkout."""
    if not (ROOT / "frontend" / "dist" / "index.html").is_file():
        pytest.fail("frontend/dist is not built: run `make frontend` (the wheel carries it)")
    work = tmp_path_factory.mktemp("wheel")
    wheels = work / "dist"
    env = {k: v for k, v in os.environ.items() if k != "NEXUS_WHEEL_WITHOUT_WEB"}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            ".",
        ],
        cwd=ROOT,
        env=env,
    )
    [wheel] = wheels.glob("nexus_crm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    tracked = _run(["git", "ls-files", "nexus"], cwd=ROOT).stdout.split()
    data_files = {name for name in tracked if not name.endswith(".py")}
    assert data_files - shipped == set()  # every file the code may open is in the wheel
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    _run([*pip, "--require-hashes", "-r", str(ROOT / "requirements" / "runtime.txt")])
    _run([*pip, "--no-deps", str(wheel)])
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import nexus; print(nexus.__file__)"], cwd=work
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # not the checkout
    return venv / "bin" / "nexus"


def test_a_fresh_wheel_install_serves_a_working_crm(
    installed_nexus: Path, tmp_path: Path, backend: Backend
) -> None:
    home = tmp_path / "home"  # the operator's directory: no source tree in sight
    home.mkdir()
    stack = running_stack(
        tmp_path,
        backend,
        nexus=[str(installed_nexus)],
        cwd=home,
        NEXUS_INTEGRATION_CATALOG_POLL_SECONDS="0.5",
        NEXUS_BOOTSTRAP_ADMIN_PASSWORD=ADMIN_PASSWORD,
    )
    with stack as (_proc, base, _elapsed):
        env = clean_env(tmp_path, NEXUS_PORT_BASE=str(base))
        if backend.name == "mariadb":
            env.update(backend.env())
        _a_sales_users_first_minutes(f"http://127.0.0.1:{base}")
        _a_signed_webhook_becomes_a_record(installed_nexus, home, env, tmp_path)


def _a_sales_users_first_minutes(gateway: str) -> None:
    index = httpx.get(f"{gateway}/", timeout=10)
    assert index.status_code == 200
    assert "<div id=" in index.text  # the browser bundle's index.html, from the wheel
    with httpx.Client(base_url=gateway, timeout=30) as client:
        token = client.post(
            "/services/oauth2/token",
            data={"grant_type": "password", "username": "admin", "password": ADMIN_PASSWORD},
        )
        assert token.status_code == 200, token.text
        client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

        created = client.post(f"{API}/sobjects/Account", json={"Name": "Wheelwright Ltd"})
        assert created.status_code == 201, created.text
        account_id = created.json()["id"]

        soql = "SELECT Id, Name, Owner.Name FROM Account WHERE Name = 'Wheelwright Ltd'"
        queried = client.get(f"{API}/query", params={"q": soql})
        assert queried.status_code == 200, queried.text
        [row] = queried.json()["records"]
        assert row["Id"] == account_id
        assert row["Owner"]["Name"]  # the parent path resolved: the admin owns it

        sosl = "FIND {Wheelwright} IN ALL FIELDS RETURNING Account(Id, Name)"
        found = client.get(f"{API}/search", params={"q": sosl})
        assert found.status_code == 200, found.text
        assert [r["Id"] for r in found.json()["searchRecords"]] == [account_id]

        listed = client.get(f"{API}/ui-api/list-ui/Account/All_Accounts")
        assert listed.status_code == 200, listed.text
        ids = [r["id"] for r in listed.json()["records"]["records"]]
        assert account_id in ids


def _a_signed_webhook_becomes_a_record(
    nexus: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    def cli(*args: str) -> str:
        return nexus_cli(env, *args, command=[str(nexus)], cwd=home)

    applied = set_up_contacts_route(env, tmp_path, command=[str(nexus)], cwd=home)
    assert "(changed)" in applied
    body = {
        "type": "contact.created",
        "object": "contact",
        "data": {"id": "7", "last_name": "Hopper"},
    }
    (tmp_path / "delivery.json").write_text(json.dumps(body))
    send = ["hooks", "send", "--connector", "crm-demo", "--route", "contacts"]
    sent = cli(*send, "--delivery-id", "wheel-1", str(tmp_path / "delivery.json"))
    assert "status: 200" in sent
    soql = "SELECT LastName FROM Contact WHERE External_Id__c = '7'"
    deadline = time.monotonic() + 60
    while not json.loads(cli("query", soql, "--username", "admin"))["records"]:
        assert time.monotonic() < deadline, "the webhook did not become a Contact"
        time.sleep(0.5)
    [contact] = json.loads(cli("query", soql, "--username", "admin"))["records"]
    assert contact["LastName"] == "Hopper"
