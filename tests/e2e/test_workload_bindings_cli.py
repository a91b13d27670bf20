"""`nexus admin bind-workload / unbind-workload / list-bindings` as an operator runs them,
and the binding a fresh stack gets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.test_admin_cli import run

pytestmark = pytest.mark.e2e


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """SQLite only: the CLI is the subject here (the binding SQL runs on both backends in
    tests/integration/runtime/test_commands.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(tmp_path / "var"), NEXUS_BOOTSTRAP_ADMIN_PASSWORD="cli-admin-pw-123"
    )
    assert run(env, "migrate", "--service", "runtime").returncode == 0
    return env


def test_a_fresh_stack_binds_integration_and_an_operator_can_rebind_it(
    env: dict[str, str],
) -> None:
    boot = run(env, "admin", "bootstrap")
    assert boot.returncode == 0, boot.stderr
    assert "Webhook commands run as user 'integration'" in boot.stdout
    listed = run(env, "admin", "list-bindings")
    assert listed.stdout.startswith("integration  integration  005"), listed.stdout

    user = run(env, "admin", "create-user", "--username", "etl@example.com")
    assert user.returncode == 0, user.stderr
    bound = run(
        env, "admin", "bind-workload", "--workload", "integration", "--username", "etl@example.com"
    )
    assert bound.returncode == 0, bound.stderr
    assert "commands run as etl@example.com" in bound.stdout
    wrong = run(env, "admin", "bind-workload", "--workload", "catalog", "--username", "etl@x.io")
    assert wrong.returncode == 1
    assert "cannot send commands (known: integration)" in wrong.stderr

    unbound = run(env, "admin", "unbind-workload", "--workload", "integration")
    assert unbound.returncode == 0, unbound.stderr
    assert run(env, "admin", "list-bindings").stdout == ""
    again = run(env, "admin", "unbind-workload", "--workload", "integration")
    assert again.returncode == 1
    assert "is not bound" in again.stderr
