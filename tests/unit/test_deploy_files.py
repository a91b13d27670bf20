"""The Dockerfile and compose file agree with the CLI and the settings model.

No Docker engine runs in CI, so these files are checked by parsing them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from nexus.contracts.roles import KNOWN_APPS, Role
from nexus.platform.settings import env_var_names

ROOT = Path(__file__).resolve().parents[2]
ENV_REFERENCE = re.compile(r"\bNEXUS_[A-Z0-9_]+\b")


def _compose() -> dict:
    return yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())


def test_every_cli_role_runs_as_a_compose_service() -> None:
    services = _compose()["services"]
    commands = [" ".join(s.get("command", [])) for s in services.values()]
    for role in Role:
        if role is Role.APP:
            for app in KNOWN_APPS:
                assert any(f"--role=app --app={app}" in c for c in commands), app
        else:
            assert any(f"--role={role.value}" in c.split() for c in commands), role


def test_roles_in_compose_run_against_mariadb_with_their_own_databases() -> None:
    compose = _compose()
    urls = []
    for service in ("runtime", "catalog", "integration"):
        value = compose[f"x-{service}-db"][f"NEXUS_{service.upper()}_DATABASE_URL"]
        default = re.fullmatch(r"\$\{NEXUS_[A-Z_]+:-(.+)\}", value)
        assert default, value  # overridable from the environment, with a working default
        urls.append(default.group(1))
    assert all(u.startswith("mysql+aiomysql://") and "@mariadb:3306/" in u for u in urls)
    assert len({u.rsplit("/", 1)[-1] for u in urls}) == 3
    assert len({u.split("://", 1)[1].split(":", 1)[0] for u in urls}) == 3  # own credentials
    assert compose["services"]["mariadb"]["image"].endswith("mariadb:10.11}")  # as CI tests


#: A setting a file sets (a YAML key or an ENV assignment), not a compose variable it
#: interpolates (`${NEXUS_IMAGE:-nexus}`): only the former must be in the settings model.
SETTING_ASSIGNED = re.compile(r"(?<![{\w])(NEXUS_[A-Z0-9_]+)(?=\s*[:=])")


def test_every_setting_assigned_exists_in_the_settings_model() -> None:
    known = env_var_names()
    texts = {
        "compose.yaml": (ROOT / "deploy" / "compose.yaml").read_text(),
        "Dockerfile": (ROOT / "Dockerfile").read_text(),
    }
    for name, text in texts.items():
        used = set(SETTING_ASSIGNED.findall(text))
        assert used, name
        assert used <= known, f"{name} uses unknown settings: {sorted(used - known)}"


def test_dockerfile_is_one_non_root_image_serving_a_role() -> None:
    lines = [
        line.strip()
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    final_stage = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]
    users = [line.split()[1] for line in final_stage if line.startswith("USER ")]
    assert users
    assert users[-1].split(":")[0] not in ("root", "0")
    entrypoint = next(line for line in final_stage if line.startswith("ENTRYPOINT "))
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT ")) == ["nexus", "serve"]


def test_the_image_installs_a_wheel_carrying_the_browser_bundle_from_the_lock() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG NODE_IMAGE=node:20\S*$", text, re.MULTILINE)
    assert re.search(r"^FROM \$\{NODE_IMAGE\} AS frontend$", text, re.MULTILINE)
    assert "RUN npm ci" in text  # from the committed lock file
    wheel_stage = text[text.index(" AS wheel\n") : text.rindex("\nFROM ")]
    assert "COPY --from=frontend /src/frontend/dist ./frontend/dist" in wheel_stage
    final_stage = text[text.rindex("\nFROM ") :]
    lock = final_stage.index("--require-hashes")
    assert lock < final_stage.index("COPY --from=wheel")  # dependency layer before the source
    assert "pip install --no-cache-dir --no-deps /tmp/dist/*.whl" in final_stage
    assert "USER 10001:10001" in final_stage
