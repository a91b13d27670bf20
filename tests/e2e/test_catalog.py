"""Catalog release jobs as an operator runs them: `nexus catalog ...` processes against a real
runtime-api and integration, on SQLite and MariaDB; crashes are real process kills."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import Engine, create_engine, inspect, text

from nexus.catalog.service import STATES
from nexus.contracts.catalog import SnapshotKeeper, SnapshotRejected
from nexus.contracts.roles import LogicalService, Role
from nexus.platform.secrets import ensure_local_secrets, workload_signer
from nexus.platform.settings import load_settings
from tests.conftest import Backend
from tests.e2e.test_stack import free_port_base

NEXUS = [sys.executable, "-m", "nexus"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "apps"
SFCRM = Path(__file__).resolve().parents[2] / "nexus" / "apps" / "sfcrm" / "package"
PASSWORD = "catalog-admin-pw-1"
FINAL = re.compile(r"CatalogRevision (\d+), SchemaGeneration (\d+), SecurityEpoch (\d+)")


@dataclass
class Stack:
    env: dict[str, str]
    tmp: Path
    base: int
    catalog_db: Engine
    runtime_db: Engine

    def nexus(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*NEXUS, *args],
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def apply(self, path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        return self.nexus("catalog", "apply", str(path), **extra)

    def org(self) -> dict[str, Any]:
        with self.catalog_db.connect() as conn:
            return dict(conn.execute(text("SELECT * FROM catalog_org")).mappings().one())

    def steps(self, job_id: str) -> list[str]:
        with self.catalog_db.connect() as conn:
            rows = conn.execute(
                text("SELECT state FROM catalog_job_step WHERE job_id = :j ORDER BY at_ms"),
                {"j": job_id},
            )
            return [r.state for r in rows]

    def columns(self, table: str) -> set[str]:
        with self.runtime_db.connect() as conn:
            return {c["name"].lower() for c in inspect(conn).get_columns(table)}


def _sync_url(url: str) -> str:
    return url.replace("+aiosqlite", "").replace("+aiomysql", "+pymysql")


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{url} exited"
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready")


def _start(stack: Stack, *args: str, port_offset: int) -> subprocess.Popen[bytes]:
    name = args[0].removeprefix("--role=")
    with (stack.tmp / f"{name}.log").open("a") as log:
        proc = subprocess.Popen(
            [*NEXUS, "serve", *args], env=stack.env, stdout=log, stderr=subprocess.STDOUT
        )
    _wait_ready(f"http://127.0.0.1:{stack.base + port_offset}", proc)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def stack(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Migrated databases, the first admin, runtime-api and integration (no loops) running."""
    tmp = tmp_path_factory.mktemp("catalog")
    base = free_port_base()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(tmp / "var"),
        NEXUS_PORT_BASE=str(base),
        NEXUS_BOOTSTRAP_ADMIN_PASSWORD=PASSWORD,
        NEXUS_LOG_FORMAT="json",
        **backend.env(),
    )
    ensure_local_secrets(tmp / "var", ["catalog", "runtime-api", "integration", "app-sfcrm"])
    catalog_db = create_engine(_sync_url(backend.url(LogicalService.CATALOG)))
    runtime_db = create_engine(_sync_url(backend.url(LogicalService.RUNTIME)))
    stack = Stack(env, tmp, base, catalog_db, runtime_db)
    assert stack.nexus("migrate").returncode == 0
    assert stack.nexus("admin", "bootstrap").returncode == 0
    runtime = _start(stack, "--role=runtime-api", port_offset=1)
    integration = _start(stack, "--role=integration", "--loops=none", port_offset=4)
    try:
        yield stack
    finally:
        _stop(integration)
        _stop(runtime)
        catalog_db.dispose()
        runtime_db.dispose()


def variant(
    src: Path, dst: Path, version: str, change: Callable[[Path], None] | None = None
) -> Path:
    """A copy of a fixture package with another version (and `change` applied to it)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    manifest = yaml.safe_load((dst / "manifest.yaml").read_text())
    manifest["version"] = version
    (dst / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    if change is not None:
        change(dst)
    return dst


def edit_yaml(path: Path, change: Callable[[Any], None]) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def states_printed(stdout: str) -> list[str]:
    return re.findall(r"^\[\d/8\] (\w+)", stdout, flags=re.MULTILINE)


def job_id_of(stdout: str) -> str:
    match = re.search(r"\(job ([0-9a-f-]{36})\)", stdout)
    assert match, stdout
    return match.group(1)


# ---------------------------------------------------------------------------- tests


def test_install_an_extension_and_refuse_uninstalling_what_it_needs(stack: Stack) -> None:
    tracker = stack.apply(FIXTURES / "issue_tracker")
    assert tracker.returncode == 0, tracker.stderr
    assert states_printed(tracker.stdout) == list(STATES)
    first = FINAL.search(tracker.stdout)
    assert first, tracker.stdout
    assert int(first.group(1)) == 1
    assert int(first.group(2)) >= 1  # Runtime created the tables

    sla = stack.apply(FIXTURES / "tracker_sla")
    assert sla.returncode == 0, sla.stderr
    second = FINAL.search(sla.stdout)
    assert second, sla.stdout
    assert int(second.group(1)) == 2
    assert "due_date__c" in stack.columns("rt_issue__c")  # a field of one App on another's

    refused = stack.nexus("catalog", "uninstall", "issue-tracker")
    assert refused.returncode == 1
    assert "installed Apps depend on issue-tracker: tracker-sla" in refused.stderr
    assert stack.org()["active_revision"] == 2

    again = stack.apply(FIXTURES / "issue_tracker")
    assert again.returncode == 0
    assert "issue-tracker 1.0.0 is already installed" in again.stdout
    changed = variant(
        FIXTURES / "issue_tracker",
        stack.tmp / "tracker-changed",
        "1.0.0",
        lambda p: edit_yaml(
            p / "components" / "security.yaml",
            lambda d: d["components"][2]["definition"].update(label="Renamed"),
        ),
    )
    taken = stack.apply(changed)
    assert taken.returncode == 1
    assert "VERSION_TAKEN" in taken.stderr

    status = stack.nexus("catalog", "status")
    assert "issue-tracker        1.0.0" in status.stdout

    assert "active CatalogRevision 2" in status.stdout

    def steal(p: Path) -> None:  # another App declaring the tracker's Issue__c
        manifest = yaml.safe_load((p / "manifest.yaml").read_text())
        manifest.update(app_id="thief", namespaces=["thief"])
        (p / "manifest.yaml").write_text(yaml.safe_dump(manifest))
        for name in ("security.yaml", "logic.yaml"):
            (p / "components" / name).unlink()

    thief = stack.apply(variant(FIXTURES / "issue_tracker", stack.tmp / "thief", "1.0.0", steal))
    assert thief.returncode == 1
    assert "object Issue__c is owned by App issue-tracker" in thief.stderr
    assert stack.org()["active_revision"] == 2

    def break_kind(p: Path) -> None:
        edit_yaml(p / "components" / "logic.yaml", lambda d: d["components"][1].update(kind="x"))

    broken = variant(FIXTURES / "issue_tracker", stack.tmp / "broken", "9.9.9", break_kind)
    invalid = stack.nexus("catalog", "validate", str(broken))
    assert invalid.returncode == 1
    assert invalid.stderr.splitlines()[0] == (
        f"{broken}/components/logic.yaml: components[1].kind: unknown component kind 'x'"
    )


def _sfcrm_1_0(dst: Path) -> Path:
    """sfcrm in its 1.0.0 shape: `AccountType`/`OpportunityType` (when Runtime reserved
    `Type`), no `Type` and no `External_Id__c` on Account and Opportunity."""
    renamed = {"Account": "AccountType", "Opportunity": "OpportunityType"}

    def objects(d: Any) -> None:
        for comp in d["components"]:
            if comp["key"] in renamed:
                fields = comp["definition"]["fields"]
                gone = ("Type", "External_Id__c")
                comp["definition"]["fields"] = [f for f in fields if f["api_name"] not in gone]

    def ui(d: Any) -> None:
        for comp in d["components"]:
            old = renamed.get(comp["definition"].get("object"))
            for section in comp["definition"].get("sections", []):
                section["fields"] = [old if f == "Type" else f for f in section["fields"]]
            if "columns" in comp["definition"] and isinstance(comp["definition"]["columns"], list):
                columns = comp["definition"]["columns"]
                comp["definition"]["columns"] = [old if c == "Type" else c for c in columns]

    def shape(p: Path) -> None:
        edit_yaml(p / "components" / "objects.yaml", objects)
        edit_yaml(p / "components" / "ui.yaml", ui)

    return variant(SFCRM, dst, "1.0.0", shape)


def test_sfcrm_installs_beside_the_fixture_and_sample_data_loads(stack: Stack) -> None:
    old = stack.apply(_sfcrm_1_0(stack.tmp / "sfcrm-1.0.0"))  # an install from before `Type`
    assert old.returncode == 0, old.stderr
    assert "sfcrm 1.0.0: ACTIVE" in old.stdout
    installed = stack.apply(SFCRM)  # the upgrade adds `Type` (additive: AccountType stays)
    assert installed.returncode == 0, installed.stderr
    assert "sfcrm 1.2.0: ACTIVE" in installed.stdout
    assert {"type", "accounttype", "external_id__c"} <= stack.columns("rt_account")
    assert {"rt_account", "rt_opportunity", "rt_task"} <= set(
        inspect(stack.runtime_db).get_table_names()
    )
    loaded = stack.nexus("demo", "load", "--accounts", "30")
    assert loaded.returncode == 0, loaded.stderr
    assert "Account: 30 record(s) created" in loaded.stdout
    again = stack.nexus("demo", "load", "--accounts", "30")  # idempotent: adds nothing
    assert again.returncode == 0, again.stderr
    assert "Account: 0 record(s) created, 30 already there" in again.stdout
    assert "Opportunity: 0 record(s) created" in again.stdout
    with stack.runtime_db.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM rt_account")).scalar() == 30
    typed = stack.nexus("query", "SELECT Name, Type FROM Account LIMIT 3", "--username", "admin")
    assert typed.returncode == 0, typed.stderr
    assert re.search(r'"Type": "(Prospect|Customer - Direct|Customer - Channel)"', typed.stdout)
    won = stack.nexus(
        "query",
        "SELECT Probability FROM Opportunity WHERE StageName = 'Closed Won'",
        "--username",
        "admin",
    )
    assert won.returncode == 0, won.stderr
    assert '"Probability": 100' in won.stdout  # the before-save flow ran
    assert '"Probability": 10,' not in won.stdout


def _crashy(stack: Stack, minor: int, app_id: str = "crashy", prefix: str = "a9C") -> Path:
    """Version 1.<minor>.0 of a one-object App; each version adds a field."""
    root = stack.tmp / f"{app_id}-{minor}"
    thing = "".join(part.capitalize() for part in app_id.split("-")) + "_Thing__c"
    (root / "components").mkdir(parents=True, exist_ok=True)
    (root / "manifest.yaml").write_text(
        yaml.safe_dump(
            {
                "format": "nexus.app/v1",
                "app_id": app_id,
                "publisher_id": "nexus-tests",
                "version": f"1.{minor}.0",
                "label": "Crash test",
                "namespaces": [app_id],
                "requires": {"capabilities": ["runtime.metadata.v1"]},
            }
        )
    )
    fields = [
        {"api_name": f"F{i}__c", "label": f"F{i}", "type": "text", "length": 20}
        for i in range(minor + 1)
    ]
    (root / "components" / "thing.yaml").write_text(
        yaml.safe_dump(
            {
                "components": [
                    {
                        "kind": "object",
                        "key": thing,
                        "definition": {
                            "api_name": thing,
                            "label": "Thing",
                            "plural_label": "Things",
                            "key_prefix": prefix,
                            "name_field": {
                                "api_name": "Name",
                                "label": "Name",
                                "type": "text",
                                "length": 80,
                            },
                            "fields": fields,
                        },
                    }
                ]
            }
        )
    )
    return root


def test_a_kill_at_each_state_resumes_to_active_exactly_once(stack: Stack) -> None:
    for minor, state in enumerate(STATES[:-1]):
        before = stack.org()["catalog_revision"]
        crashed = stack.apply(_crashy(stack, minor), NEXUS_FAILPOINT=f"catalog.after.{state}")
        assert crashed.returncode == 137, (state, crashed.stdout, crashed.stderr)
        assert states_printed(crashed.stdout)[-1] == state
        job_id = job_id_of(crashed.stdout)
        if state == "RUNTIME_PREPARED":  # the catalog role resumes journaled jobs at start-up
            catalog = _start(stack, "--role=catalog", port_offset=3)
            deadline = time.monotonic() + 60
            while stack.steps(job_id)[-1:] != ["ACTIVE"] and time.monotonic() < deadline:
                time.sleep(0.2)
            _stop(catalog)
        else:
            resumed = stack.nexus("catalog", "resume")
            assert resumed.returncode == 0, (state, resumed.stderr)
            assert "resumed 1 release job(s)" in resumed.stdout
            assert states_printed(resumed.stdout) == list(STATES[STATES.index(state) + 1 :])
        org = stack.org()
        assert org["catalog_revision"] == before + 1, state  # one increment, however resumed
        assert org["active_revision"] == before + 1, state
        assert org["writer_job"] is None
        assert stack.steps(job_id) == list(STATES), state  # each state journaled once
        assert f"f{minor}__c" in stack.columns("rt_crashy_thing__c")


def test_one_writer_per_org_and_a_stale_fencing_token_cannot_advance(stack: Stack) -> None:
    before = stack.org()
    crashed = stack.apply(_crashy(stack, 20), NEXUS_FAILPOINT="catalog.after.RESERVED")
    assert crashed.returncode == 137
    stale_job = job_id_of(crashed.stdout)
    busy = stack.apply(_crashy(stack, 0, app_id="second", prefix="a9D"))
    assert busy.returncode == 1  # the crashed job still holds the org's writer lease
    assert "ORG_BUSY" in busy.stderr
    waiting_job = job_id_of(busy.stdout)
    assert stack.steps(waiting_job) == ["DRAFT", "VALIDATED"]
    with stack.catalog_db.begin() as conn:  # the lease expired and another writer took it
        conn.execute(
            text(
                "UPDATE catalog_org SET writer_token = writer_token + 1, writer_job = 'other', "
                "writer_until_ms = 0"
            )
        )
    resumed = stack.nexus("catalog", "resume")
    assert resumed.returncode == 1
    assert "fencing token" in resumed.stderr
    assert stack.steps(stale_job) == ["DRAFT", "VALIDATED", "RESERVED", "FAILED"]
    # the waiting job took the (expired) lease with a newer token and went through
    assert stack.steps(waiting_job) == list(STATES)
    org = stack.org()
    assert org["catalog_revision"] == before["catalog_revision"] + 1  # only the waiting job's
    assert org["active_revision"] == before["catalog_revision"] + 1
    assert org["writer_token"] == before["writer_token"] + 3  # crashed, taken over, waiting
    retried = stack.apply(_crashy(stack, 20))  # never committed: the same version may retry
    assert retried.returncode == 0, retried.stderr
    assert stack.org()["catalog_revision"] == before["catalog_revision"] + 2


def test_snapshots_are_checksummed_and_scoped_to_their_consumer(stack: Stack) -> None:
    catalog = _start(stack, "--role=catalog", port_offset=3)
    try:
        settings = load_settings(var_dir=stack.tmp / "var")
        url = f"http://127.0.0.1:{stack.base + 3}/internal/v1/catalog/snapshot"

        def headers(workload: str) -> dict[str, str]:
            signer = workload_signer(settings, workload)
            return {"x-nexus-workload": signer.token("catalog")}

        runtime = httpx.get(
            url, params={"consumer": "runtime"}, headers=headers(Role.RUNTIME_API.value)
        )
        assert runtime.status_code == 200, runtime.text
        keeper = SnapshotKeeper("runtime")
        snapshot = keeper.offer(runtime.json())
        assert snapshot.catalog_revision == stack.org()["active_revision"]
        apps = {a["app_id"] for a in snapshot.content["apps"]}
        assert {"issue-tracker", "tracker-sla", "sfcrm", "crashy"} <= apps
        owners = {(c["owner"], c["kind"], c["key"]) for c in snapshot.content["components"]}
        assert ("tracker-sla", "field", "Issue__c.Due_Date__c") in owners
        forged = runtime.json() | {"checksum": "0" * 64}
        with pytest.raises(SnapshotRejected, match="checksum"):
            keeper.offer(forged)
        assert keeper.current == snapshot  # the last verified one stays

        integration = httpx.get(
            url, params={"consumer": "integration"}, headers=headers("integration")
        )
        assert integration.status_code == 200
        routes = integration.json()["content"]["routes"]
        assert {(r["connector"], r["route"]) for r in routes} == {
            ("sfcrm", "contacts"),
            ("sfcrm", "customers"),
        }
        wrong = httpx.get(url, params={"consumer": "integration"}, headers=headers("runtime-api"))
        assert wrong.status_code == 403
        assert httpx.get(url, params={"consumer": "runtime"}).status_code == 401
        # Runtime's release API answers the catalog workload only
        state_url = f"http://127.0.0.1:{stack.base + 1}/internal/v1/runtime/releases/state"
        deadline = {"x-nexus-deadline": str(int((time.time() + 30) * 1000))}
        for workload, status in (("catalog", 200), ("integration", 403), ("app-sfcrm", 403)):
            signed = workload_signer(settings, workload).token("runtime-api")
            reply = httpx.post(state_url, headers={"x-nexus-workload": signed, **deadline})
            assert reply.status_code == status, (workload, reply.text)
        assert httpx.post(state_url, headers=deadline).status_code == 401
        # Runtime installs only the published, checksummed content
        prepare = state_url.removesuffix("/state") + "/prepare"
        org = stack.org()
        body = {
            "org_id": org["org_id"],
            "catalog_revision": snapshot.catalog_revision,
            "fencing_token": org["writer_token"],
            "app_id": "sfcrm",
            "snapshot": forged,
            "components": [],
        }
        catalog_token = workload_signer(settings, "catalog").token("runtime-api")
        signed_headers = {"x-nexus-workload": catalog_token, **deadline}
        refused = httpx.post(prepare, json=body, headers=signed_headers)
        assert refused.status_code == 400
        assert "failed verification" in refused.json()["message"]
        body["snapshot"] = snapshot.model_dump()
        body["components"] = [
            {"kind": "layout", "key": "Account_Layout", "definition": {"api_name": "Hacked"}}
        ]
        altered = httpx.post(prepare, json=body, headers=signed_headers)
        assert altered.status_code == 400
        assert "not the published definition" in altered.json()["message"]
        _admin_api(stack)
    finally:
        _stop(catalog)


def _admin_api(stack: Stack) -> None:
    """The console's API: Runtime authorizes each request; the same jobs and journal."""
    admin = f"http://127.0.0.1:{stack.base + 3}/admin/v1/catalog"
    assert httpx.get(f"{admin}/status").status_code == 401
    token = httpx.post(
        f"http://127.0.0.1:{stack.base + 1}/services/oauth2/token",
        data={"grant_type": "password", "username": "admin", "password": PASSWORD},
    )
    assert token.status_code == 200, token.text
    auth = {"authorization": f"Bearer {token.json()['access_token']}"}
    assert httpx.get(f"{admin}/status", headers={"authorization": "Bearer nope"}).status_code == 401
    status = httpx.get(f"{admin}/status", headers=auth)
    assert status.status_code == 200
    assert "crashy" in {a["app_id"] for a in status.json()["apps"]}
    files = {
        str(p.relative_to(FIXTURES / "tracker_sla")): p.read_text()
        for p in (FIXTURES / "tracker_sla").rglob("*.yaml")
    }
    validated = httpx.post(f"{admin}/validate", json={"files": files}, headers=auth)
    assert validated.status_code == 200
    assert validated.json()["app_id"] == "tracker-sla"
    files["components/sla.yaml"] = files["components/sla.yaml"].replace("kind: field", "kind: x")
    invalid = httpx.post(f"{admin}/validate", json={"files": files}, headers=auth)
    assert invalid.status_code == 400
    assert invalid.json()["fields"] == {
        "components/sla.yaml: components[0].kind": "unknown component kind 'x'"
    }
    removed = httpx.post(f"{admin}/uninstall", json={"app_id": "crashy"}, headers=auth, timeout=60)
    assert removed.status_code == 200, removed.text
    assert removed.json()["state"] == "ACTIVE"
    assert [s["state"] for s in removed.json()["steps"]] == list(STATES)
    after = httpx.get(f"{admin}/status", headers=auth).json()
    assert "crashy" not in {a["app_id"] for a in after["apps"]}
    assert after["active_revision"] == removed.json()["catalog_revision"]


def test_upgrades_keep_customizations_refuse_removals_and_roll_back_forward(
    stack: Stack,
) -> None:
    layout = {
        "layouts": [
            {
                "api_name": "Issue_Layout",
                "object": "Issue__c",
                "sections": [{"label": "Ours", "fields": ["Name", "Title__c"]}],
            }
        ]
    }
    custom = stack.tmp / "custom-layout.yaml"
    custom.write_text(yaml.safe_dump(layout))
    edited = stack.nexus("metadata", "apply", str(custom))  # an online edit: no Catalog
    assert edited.returncode == 0, edited.stderr

    def add_estimate(p: Path) -> None:
        def objects(d: Any) -> None:
            d["components"][1]["definition"]["fields"].append(
                {"api_name": "Estimate__c", "label": "Estimate", "type": "number"}
            )

        def logic(d: Any) -> None:
            d["components"][2]["definition"]["sections"][0]["fields"].append("Estimate__c")

        edit_yaml(p / "components" / "objects.yaml", objects)
        edit_yaml(p / "components" / "logic.yaml", logic)

    upgraded = stack.apply(
        variant(FIXTURES / "issue_tracker", stack.tmp / "t110", "1.1.0", add_estimate)
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert "kept the org's customization of layout:Issue_Layout" in upgraded.stdout
    assert "estimate__c" in stack.columns("rt_issue__c")
    with stack.runtime_db.connect() as conn:
        body = conn.execute(
            text(
                "SELECT d.body FROM runtime_definition d JOIN runtime_active_definition a"
                " ON a.org_id = d.org_id AND a.kind = d.kind AND a.name = d.name"
                " AND a.version = d.version WHERE d.name = 'Issue_Layout'"
            )
        ).scalar_one()
    assert "Ours" in body

    def drop_points(p: Path) -> None:
        edit_yaml(
            p / "components" / "objects.yaml",
            lambda d: d["components"][1]["definition"]["fields"].pop(),
        )

    removal = stack.apply(variant(stack.tmp / "t110", stack.tmp / "t120", "1.2.0", drop_points))
    assert removal.returncode == 1
    assert "removing field Issue__c.Estimate__c is not supported" in removal.stderr

    revision = stack.org()["active_revision"]
    rolled = stack.nexus("catalog", "rollback", "issue-tracker", "--to", "1.0.0")
    assert rolled.returncode == 0, rolled.stderr
    final = FINAL.search(rolled.stdout)
    assert final, rolled.stdout
    assert int(final.group(1)) == revision + 1  # a newer revision, older content
    assert stack.org()["active_revision"] == revision + 1
    assert "estimate__c" in stack.columns("rt_issue__c")  # data is never dropped
    status = stack.nexus("catalog", "status")
    assert "issue-tracker        1.0.0" in status.stdout

    # uninstall: dependents first; the App's flows and rules stop, its data stays
    assert stack.nexus("catalog", "uninstall", "tracker-sla").returncode == 0
    gone = stack.nexus("catalog", "uninstall", "issue-tracker")
    assert gone.returncode == 0, gone.stderr
    assert "issue-tracker 1.0.0: ACTIVE" in gone.stdout
    with stack.runtime_db.connect() as conn:
        bodies = dict(
            conn.execute(
                text(
                    "SELECT d.name, d.body FROM runtime_definition d"
                    " JOIN runtime_active_definition a ON a.org_id = d.org_id"
                    " AND a.kind = d.kind AND a.name = d.name AND a.version = d.version"
                    " WHERE d.name IN ('Issue_Resolved_Flag', 'Points_Not_Negative',"
                    " 'Issue_Layout')"
                )
            ).all()
        )
    assert '"active":false' in bodies["Issue_Resolved_Flag"]  # removal_policy: deactivate
    assert '"active":false' in bodies["Points_Not_Negative"]
    assert "Ours" in bodies["Issue_Layout"]  # retained (and still the org's own)
    assert "due_date__c" in stack.columns("rt_issue__c")
    final_status = stack.nexus("catalog", "status").stdout
    assert "issue-tracker " not in final_status.split("  job")[0]
