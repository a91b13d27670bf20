"""App packages: the published schema, validation errors by file and path, release digests,
version ranges, install-time checks and snapshot verification."""

from __future__ import annotations

import ast
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from nexus.catalog.checks import check_release, check_uninstall
from nexus.catalog.loader import InvalidPackage, load_package
from nexus.catalog.package import satisfies
from nexus.catalog.release import Release
from nexus.catalog.schema_export import SCHEMA_FILE, render
from nexus.contracts.catalog import Snapshot, SnapshotKeeper, SnapshotRejected, canonical_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "apps"
TRACKER = FIXTURES / "issue_tracker"
SLA = FIXTURES / "tracker_sla"
SFCRM = Path(__file__).resolve().parents[2] / "nexus" / "apps" / "sfcrm" / "package"


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit(path: Path, change: Any) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def problems(path: Path) -> list[str]:
    with pytest.raises(InvalidPackage) as caught:
        load_package(path)
    return [str(p) for p in caught.value.problems]


def test_the_published_json_schema_is_the_one_validation_applies() -> None:
    assert SCHEMA_FILE.read_text() == render(), "run python -m nexus.catalog.schema_export"
    schema = json.loads(SCHEMA_FILE.read_text())
    kinds = schema["$defs"]["Component"]["properties"]["kind"]["enum"]
    assert "connector_route" in kinds
    assert "flow" in kinds


def test_the_shipped_packages_are_valid() -> None:
    assert load_package(SFCRM).manifest.app_id == "sfcrm"
    assert len(load_package(SFCRM).components) > 30
    assert load_package(TRACKER).manifest.app_id == "issue-tracker"
    assert load_package(SLA).manifest.dependencies[0].alias == "itrk"


def test_same_content_same_digest_whatever_the_layout(tmp_path: Path) -> None:
    original = load_package(TRACKER).digest
    moved = copy(TRACKER, tmp_path / "moved")
    # split one file in two, reorder keys, spell a default out and a number differently
    logic = moved / "components" / "logic.yaml"
    data = yaml.safe_load(logic.read_text())
    first, rest = data["components"][:1], data["components"][1:]
    first[0]["definition_version"] = 1
    first[0] = dict(reversed(list(first[0].items())))
    logic.write_text(yaml.safe_dump({"components": rest}, sort_keys=True))
    (moved / "components" / "more").mkdir()
    (moved / "components" / "more" / "rule.yml").write_text(yaml.safe_dump({"components": first}))
    edit(
        moved / "components" / "objects.yaml",
        lambda d: d["components"][1]["definition"]["fields"][3].update(precision=4.0),
    )
    assert load_package(moved).digest == original
    archive = tmp_path / "tracker.nexuspkg"
    with zipfile.ZipFile(archive, "w") as zf:
        for file in moved.rglob("*.y*ml"):
            zf.write(file, f"issue_tracker/{file.relative_to(moved)}")
    assert load_package(archive).digest == original
    edit(
        moved / "components" / "security.yaml",
        lambda d: d["components"][2]["definition"].update(label="Tracker Users"),
    )
    assert load_package(moved).digest != original


def test_an_unknown_kind_is_named_with_its_file_and_path(tmp_path: Path) -> None:
    pkg = copy(TRACKER, tmp_path / "p")
    edit(pkg / "components" / "logic.yaml", lambda d: d["components"][1].update(kind="macro"))
    assert problems(pkg) == [
        "components/logic.yaml: components[1].kind: unknown component kind 'macro'"
    ]


def test_a_missing_capability_is_named(tmp_path: Path) -> None:
    pkg = copy(TRACKER, tmp_path / "p")
    edit(pkg / "manifest.yaml", lambda d: d["requires"]["capabilities"].remove("runtime.flows.v1"))
    assert problems(pkg) == [
        "components/logic.yaml: components[1].kind: flow needs engine capability "
        "'runtime.flows.v1': add it to manifest.yaml requires.capabilities"
    ]


def test_references_outside_the_package_need_a_declared_dependency(tmp_path: Path) -> None:
    pkg = copy(SLA, tmp_path / "p")
    edit(pkg / "manifest.yaml", lambda d: d.update(dependencies=[]))
    found = problems(pkg)
    assert (
        "components/sla.yaml: components[0].definition.object: 'itrk:Issue__c' names App "
        in (found[0])
    )
    assert "not a declared dependency" in found[0]
    unqualified = copy(SLA, tmp_path / "q")
    edit(
        unqualified / "components" / "sla.yaml",
        lambda d: d["components"][1]["definition"].update(object="Issue__c"),
    )
    assert problems(unqualified) == [
        "components/sla.yaml: components[1].definition.object: no object 'Issue__c' in this "
        "package (a component of another App is referenced as alias:Name, with that App "
        "declared as a dependency)"
    ]


def test_schema_keys_and_duplicates_are_checked(tmp_path: Path) -> None:
    manifest = copy(TRACKER, tmp_path / "m")
    edit(manifest / "manifest.yaml", lambda d: d.update(version="1.0", surprise=True))
    found = problems(manifest)
    assert any(p.startswith("manifest.yaml: version: String should match pattern") for p in found)
    assert "manifest.yaml: surprise: Extra inputs are not permitted" in found
    pkg = copy(TRACKER, tmp_path / "p")
    edit(
        pkg / "components" / "logic.yaml",
        lambda d: d["components"].append(dict(d["components"][0])),
    )
    edit(
        pkg / "components" / "objects.yaml",
        lambda d: d["components"][0]["definition"].update(api_name="Other__c"),
    )
    assert problems(pkg) == [
        "components/logic.yaml: components[4].key: validation_rule 'Points_Not_Negative' is "
        "also defined in components/logic.yaml components[0]",
        "components/objects.yaml: components[0].definition.api_name: must equal the "
        "component key 'Tracker_Project__c'",
    ]


def test_version_ranges() -> None:
    assert satisfies("1.4.2", ">=1.0.0, <2.0.0")
    assert not satisfies("2.0.0", ">=1.0.0, <2.0.0")
    assert satisfies("1.9.0", "^1.2")
    assert not satisfies("1.1.0", "^1.2")
    assert satisfies("1.2.9", "~1.2")
    assert not satisfies("1.3.0", "~1.2")
    assert satisfies("0.3.1", "^0.3.0")
    assert not satisfies("0.4.0", "^0.3.0")


def _release(path: Path) -> Release:
    package = load_package(path)
    return Release(package.manifest, tuple(c.component for c in package.components))


def _check(release: Release, **overrides: Any) -> list[str]:
    options: dict[str, Any] = {
        "installed": {},
        "owners": {},
        "namespaces": {},
        "engine_generation": 1,
        "capabilities": {"runtime.metadata.v1", "runtime.flows.v1", "runtime.roles.v1"},
    }
    return check_release(release, **(options | overrides))


def test_upgrades_are_additive_and_ownership_is_write_once(tmp_path: Path) -> None:
    current = _release(TRACKER)
    assert _check(current) == []
    pkg = copy(TRACKER, tmp_path / "p")
    edit(pkg / "manifest.yaml", lambda d: d.update(version="1.1.0"))

    def change(d: dict[str, Any]) -> None:
        fields = d["components"][1]["definition"]["fields"]
        fields[:] = [f for f in fields if f["api_name"] != "Resolved__c"]
        next(f for f in fields if f["api_name"] == "Points__c")["type"] = "text"
        next(f for f in fields if f["api_name"] == "Points__c").update(length=10)
        next(f for f in fields if f["api_name"] == "Points__c").pop("precision")
        next(f for f in fields if f["api_name"] == "Points__c").pop("scale")

    edit(pkg / "components" / "objects.yaml", change)
    found = _check(_release(pkg), installed={"issue-tracker": current})
    assert "removing field Issue__c.Resolved__c is not supported (additive upgrades only)" in found
    assert "changing the type of Issue__c.Points__c (number -> text) is refused" in found
    assert _check(
        current,
        owners={("object", "issue__c"): "someone-else"},
        namespaces={"itrk": "someone-else"},
    ) == [
        "object Issue__c is owned by App someone-else",
        "namespace 'itrk' is owned by App someone-else",
    ]
    assert _check(current, capabilities={"runtime.metadata.v1"}) == [
        "needs engine capabilities this deployment lacks: runtime.flows.v1, runtime.roles.v1"
    ]


def test_dependencies_and_reverse_dependencies() -> None:
    tracker, sla = _release(TRACKER), _release(SLA)
    assert _check(sla) == ["depends on App issue-tracker (>=1.0.0, <2.0.0), which is not installed"]
    assert _check(sla, installed={"issue-tracker": tracker}) == []
    assert check_uninstall("issue-tracker", {"issue-tracker": tracker, "tracker-sla": sla}) == [
        "installed Apps depend on issue-tracker: tracker-sla (uninstall them first)"
    ]
    assert check_uninstall("tracker-sla", {"issue-tracker": tracker, "tracker-sla": sla}) == []


def test_a_consumer_keeps_its_last_verified_snapshot() -> None:
    content = {"apps": [{"app_id": "issue-tracker"}], "routes": []}
    checksum = Snapshot.checksum_of(
        consumer="integration", org_id="00Dorg", catalog_revision=3, content=content
    )
    good = {
        "consumer": "integration",
        "org_id": "00Dorg",
        "catalog_revision": 3,
        "content": content,
        "checksum": checksum,
    }
    keeper = SnapshotKeeper("integration", org_id="00Dorg")
    assert keeper.offer(good).catalog_revision == 3
    tampered = json.loads(json.dumps(good))
    tampered["catalog_revision"] = 4
    tampered["content"]["routes"] = [{"connector": "evil"}]
    with pytest.raises(SnapshotRejected, match="checksum"):
        keeper.offer(tampered)
    with pytest.raises(SnapshotRejected, match="not well formed"):
        keeper.offer({"consumer": "integration"})
    older = dict(good, catalog_revision=2)
    older["checksum"] = Snapshot.checksum_of(
        consumer="integration", org_id="00Dorg", catalog_revision=2, content=content
    )
    with pytest.raises(SnapshotRejected, match="older"):
        keeper.offer(older)
    assert keeper.current is not None
    assert keeper.current.catalog_revision == 3
    assert keeper.current.content == content


def test_canonical_json_normalizes_text_and_numbers() -> None:
    assert canonical_json({"b": 1.0, "a": "e\u0301\r\n"}) == canonical_json({"a": "é\n", "b": 1})


CRM_NAMES = {"Account", "Contact", "Lead", "Opportunity", "Case", "Task", "StageName", "sfcrm"}


def test_no_crm_names_in_l0_code() -> None:
    """The seams the issue tracker fixture exercises beside sfcrm carry no CRM semantics: no
    string in Runtime's or Catalog's code names a CRM object, field or the sfcrm App (docstrings
    aside). Workload names like `app-sfcrm` are deployment identities, not App semantics."""
    root = Path(__file__).resolve().parents[2] / "nexus"
    found = []
    for package in ("runtime", "catalog"):
        for path in (root / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(
                    node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                )
                and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docstrings
                    and CRM_NAMES & set(node.value.replace(".", " ").split())
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert found == []
