"""`nexus admin ...` as an operator runs it, against a real database file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Backend

NEXUS = [sys.executable, "-m", "nexus"]


def run(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NEXUS, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def env(tmp_path: Path, backend: Backend) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(tmp_path / "var"), NEXUS_BOOTSTRAP_ADMIN_PASSWORD="cli-admin-pw-123"
    )
    if backend.name == "mariadb":
        env.update(backend.env())
    assert run(env, "migrate").returncode == 0
    return env


def test_operator_story_roles_users_clients_and_revocation(env: dict[str, str]) -> None:
    missing_org = run(env, "admin", "create-user", "--username", "x@example.com")
    assert missing_org.returncode == 1
    assert "no org yet" in missing_org.stderr

    import asyncio  # noqa: PLC0415

    from nexus.cli.admin import bootstrap_admin  # noqa: PLC0415  (uses this process's settings)
    from nexus.platform.settings import load_settings  # noqa: PLC0415

    os.environ.update({k: v for k, v in env.items() if k.startswith("NEXUS_")})
    try:
        assert asyncio.run(bootstrap_admin(load_settings())) == ("admin", None)
    finally:
        for key in [k for k in os.environ if k.startswith("NEXUS_")]:
            del os.environ[key]

    role = run(env, "admin", "create-role", "--name", "Sales", "--parent", "CEO")
    assert role.returncode == 0, role.stderr
    user = run(
        env,
        "admin",
        "create-user",
        "--username",
        "Jane@Example.com",
        "--role",
        "Sales",
        "--password-stdin",
        stdin="jane-password-123\n",
    )
    assert user.returncode == 0, user.stderr
    assert "username: jane@example.com" in user.stdout
    assert "password:" not in user.stdout  # given on stdin, never echoed

    generated = run(env, "admin", "create-user", "--username", "sam@example.com")
    assert "password: " in generated.stdout
    assert "(shown once)" in generated.stdout

    client = run(
        env,
        "admin",
        "create-client",
        "--name",
        "Sync",
        "--grant-type",
        "client_credentials",
        "--scope",
        "api",
        "--run-as",
        "jane@example.com",
    )
    assert client.returncode == 0, client.stderr
    client_id = client.stdout.split("client_id: ")[1].split()[0]
    assert "client_secret: " in client.stdout
    listed = run(env, "admin", "list-clients")
    assert client_id in listed.stdout
    assert "enabled" in listed.stdout
    assert "client_secret" not in listed.stdout
    assert run(env, "admin", "disable-client", "--client-id", client_id).returncode == 0
    assert "disabled" in run(env, "admin", "list-clients").stdout

    bad = run(
        env, "admin", "create-client", "--name", "X", "--grant-type", "implicit", "--scope", "api"
    )
    assert bad.returncode == 1
    assert "grant types must be among" in bad.stderr

    revoked = run(env, "admin", "revoke-user", "--username", "jane@example.com")
    assert revoked.returncode == 0
    assert "sessions revoked: 0" in revoked.stdout
    unknown = run(env, "admin", "revoke-user", "--username", "nobody@example.com")
    assert unknown.returncode == 1

    (Path(env["NEXUS_VAR_DIR"]) / "ticket.yaml").write_text(
        "objects:\n"
        "  - {api_name: Ticket__c, label: Ticket, plural_label: Tickets, key_prefix: a07,\n"
        "     name_field: {api_name: Name, label: Name, type: text, length: 80},\n"
        "     fields: [{api_name: Subject__c, label: Subject, type: text, length: 80}]}\n"
    )
    applied = run(env, "metadata", "apply", str(Path(env["NEXUS_VAR_DIR"]) / "ticket.yaml"))
    assert applied.returncode == 0, applied.stderr
    query = run(env, "query", "SELECT Id, Subject__c FROM Ticket__c", "--username", "admin")
    assert query.returncode == 0, query.stderr
    assert '"totalSize": 0' in query.stdout
    malformed = run(env, "query", "SELECT FROM Ticket__c", "--username", "admin")
    assert malformed.returncode == 1
    assert "MALFORMED_QUERY" in malformed.stderr
    nobody = run(env, "query", "SELECT Id FROM Ticket__c", "--username", "nobody@example.com")
    assert nobody.returncode == 1
    assert "no active user" in nobody.stderr
