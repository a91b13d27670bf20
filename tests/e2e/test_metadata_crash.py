"""A crash between DDL and metadata activation recovers: the process is really killed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from sqlalchemy import create_engine, inspect, text

from nexus.contracts.roles import LogicalService
from tests.conftest import Backend

NEXUS = [sys.executable, "-m", "nexus"]
BATCH = {
    "objects": [
        {
            "api_name": "Project__c",
            "label": "Project",
            "plural_label": "Projects",
            "key_prefix": "a07",
            "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
            "fields": [{"api_name": "Budget__c", "label": "Budget", "type": "currency"}],
        }
    ]
}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NEXUS, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_crash_after_ddl_is_completed_on_resume(tmp_path: Path, backend: Backend) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(tmp_path / "var"), NEXUS_BOOTSTRAP_ADMIN_PASSWORD="crash-admin-pw-1"
    )
    if backend.name == "mariadb":
        env.update(backend.env())
    assert run(env, "migrate").returncode == 0
    assert run(env, "admin", "bootstrap").returncode == 0
    batch = tmp_path / "batch.yaml"
    batch.write_text(yaml.safe_dump(BATCH))

    crashed = run({**env, "NEXUS_FAILPOINT": "metadata.after_ddl"}, "metadata", "apply", str(batch))
    assert crashed.returncode == 137, crashed.stderr  # killed between DDL and activation

    url = (
        backend.url(LogicalService.RUNTIME).replace("+aiomysql", "+pymysql")
        if backend.name == "mariadb"
        else f"sqlite:///{tmp_path / 'var' / 'runtime.sqlite3'}"
    )
    db = create_engine(url)
    with db.connect() as conn:
        assert inspect(conn).has_table("rt_project__c")  # the DDL happened
        active = conn.execute(text("SELECT COUNT(*) FROM runtime_active_definition")).scalar()
        staged = conn.execute(
            text("SELECT COUNT(*) FROM runtime_metadata_apply WHERE state = 'staged'")
        ).scalar()
    assert active == 0  # ...but the metadata is not active yet
    assert staged == 1

    resumed = run(env, "metadata", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "completed 1" in resumed.stdout
    with db.connect() as conn:
        versions = conn.execute(text("SELECT name, version FROM runtime_active_definition")).all()
        generation = conn.execute(text("SELECT schema_generation FROM runtime_org_state")).scalar()
    assert versions == [("Project__c", 1)]
    assert generation == 1
    again = run(env, "metadata", "apply", str(batch))
    assert "object Project__c: unchanged" in again.stdout
    access = tmp_path / "access.yaml"
    access.write_text(
        yaml.safe_dump(
            {
                "permission_sets": [
                    {
                        "api_name": "Projects",
                        "label": "Projects",
                        "objects": [{"object": "Project__c", "read": True}],
                    }
                ]
            }
        )
    )
    assert run(env, "metadata", "apply", str(access)).returncode == 0
    granted = run(
        env, "admin", "assign-permission-set", "--username", "admin", "--permission-set", "Projects"
    )
    assert granted.returncode == 0, granted.stderr
    unknown = run(
        env, "admin", "assign-permission-set", "--username", "admin", "--permission-set", "Nope"
    )
    assert unknown.returncode == 1
    assert "no permission set named 'Nope'" in unknown.stderr
    db.dispose()
