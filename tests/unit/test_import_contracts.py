"""The import rules bite: a forbidden import in a copy of the tree makes lint-imports fail.

The copy is renamed (`nexus` -> `nexusprobe`) so the editable install of the real package
cannot shadow it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _probe_tree(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "nexus", tmp_path / "nexusprobe", ignore=shutil.ignore_patterns("__pycache__")
    )
    for source in (tmp_path / "nexusprobe").rglob("*.py"):
        text = source.read_text()
        source.write_text(re.sub(r"\bnexus\b(?=[.\s])", "nexusprobe", text))
    config = (ROOT / "pyproject.toml").read_text()
    section = config[config.index("[tool.importlinter]") :]
    (tmp_path / ".importlinter.toml").write_text(re.sub(r"\bnexus(?=[.\"])", "nexusprobe", section))
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / ".importlinter.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unmodified_copy_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_probe_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "forbidden", "contract"),
    [
        ("catalog/leak.py", "import nexusprobe.runtime.app", "bounded contexts are independent"),
        ("apps/sfcrm/leak.py", "import nexusprobe.identity", "identity is a capability of runtime"),
        ("platform/leak.py", "import nexusprobe.gateway.app", "platform imports only contracts"),
        ("contracts/leak.py", "import nexusprobe.platform.db", "contracts import nothing"),
        ("runtime/leak.py", "import nexusprobe.cli", "only the cli package composes roles"),
        (
            "runtime/leak.py",
            "import nexusprobe.identity.service",
            "runtime uses identity only through identity.api",
        ),
        ("cli/leak.py", "import nexusprobe.identity.models", "identity keeps its tables"),
        (
            "runtime/retention/repository.py",
            "import nexusprobe.runtime.retention.service",
            "each area is layered",
        ),
        ("identity/models.py", "import nexusprobe.identity.service", "each area is layered"),
        (
            "integration/operations/models.py",
            "import nexusprobe.integration.operations.service",
            "each area is layered",
        ),
        (
            "integration/routing/leak.py",
            "import nexusprobe.integration.operations.service",
            "integration operates on its pipeline",
        ),
        (
            "integration/delivery/leak.py",
            "import nexusprobe.integration.ingress.bodies",
            "integration delivery knows no other integration area",
        ),
    ],
)
def test_a_forbidden_import_breaks_the_build(
    tmp_path: Path, module: str, forbidden: str, contract: str
) -> None:
    tree = _probe_tree(tmp_path)
    (tree / "nexusprobe" / module).write_text(f"{forbidden}  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), result.stdout


def test_runtime_is_kept_from_every_identity_module_but_its_facade() -> None:
    """A new identity module is behind the facade too: the contract lists all of them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["name"] == "runtime uses identity only through identity.api"
    )
    modules = {
        f"nexus.identity.{p.stem}"
        for p in (ROOT / "nexus" / "identity").glob("*.py")
        if p.stem not in ("__init__", "api")
    }
    assert set(contract["forbidden_modules"]) == modules
