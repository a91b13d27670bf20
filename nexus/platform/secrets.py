"""Local secrets, generated on first start into `<var>/secrets/` (directory 0700, keys 0600).

Development generates what is missing; production (`NEXUS_ENV=production`) requires every
secret to be provisioned and fails at start, naming the missing file. Contents are never
logged; only names are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from nexus.platform.files import write_private
from nexus.platform.observability import get_logger
from nexus.platform.settings import Settings, SettingsError
from nexus.platform.workload import (
    WorkloadKeyMissing,
    WorkloadSigner,
    ensure_workload_keys,
    workload_key_dir,
)

log = get_logger(__name__)


def secrets_dir(var_dir: Path) -> Path:
    return var_dir / "secrets"


def ensure_local_secrets(var_dir: Path, workloads: list[str]) -> list[str]:
    """Generate missing workload key pairs; returns the workload names created."""
    directory = secrets_dir(var_dir)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    created = ensure_workload_keys(workload_key_dir(directory), workloads)
    if created:
        log.info("secrets.generated", workload_keys=created, directory=str(directory))
    return created


def workload_signer(settings: Settings, name: str) -> WorkloadSigner:
    """This role's workload identity: generated in development, required in production."""
    if settings.core.env == "development":
        ensure_local_secrets(settings.var_dir, [name])
    try:
        return WorkloadSigner.load(workload_key_dir(secrets_dir(settings.var_dir)), name)
    except WorkloadKeyMissing as exc:
        raise SettingsError(f"NEXUS_VAR_DIR: {exc}") from None


# ---------------------------------------------------------------- webhook secrets

#: A webhook secret reference: a file name under `<var>/secrets/webhooks/`, never a path.
WEBHOOK_SECRET_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class WebhookSecretMissing(Exception):
    """A referenced webhook secret is not provisioned. The message names the reference only."""


def webhook_secret_dir(var_dir: Path) -> Path:
    return secrets_dir(var_dir) / "webhooks"


def _webhook_secret_path(var_dir: Path, ref: str) -> Path:
    if not WEBHOOK_SECRET_REF.fullmatch(ref):
        raise ValueError("a webhook secret reference is 1-64 of [A-Za-z0-9._-]")
    return webhook_secret_dir(var_dir) / ref


def write_webhook_secret(var_dir: Path, ref: str, value: str) -> Path:
    """Store one webhook secret (file 0600, directory 0700), replacing it atomically."""
    if not value or "\n" in value.strip("\n"):
        raise ValueError("a webhook secret is one non-empty line")
    path = _webhook_secret_path(var_dir, ref)
    for directory in (secrets_dir(var_dir), path.parent):
        directory.mkdir(parents=True, exist_ok=True)
        if directory.stat().st_mode & 0o777 != 0o700:  # a read-only mount already is 0700
            directory.chmod(0o700)
    write_private(path, (value.strip("\n") + "\n").encode(), replace=True)
    log.info("secrets.webhook_secret_stored", ref=ref)
    return path


def read_webhook_secret(var_dir: Path, ref: str) -> str:
    """The secret a route references; WebhookSecretMissing when it is not provisioned."""
    path = _webhook_secret_path(var_dir, ref)
    try:
        value = path.read_text(encoding="utf-8").strip("\n")
    except FileNotFoundError:
        raise WebhookSecretMissing(f"webhook secret {ref!r} is not provisioned") from None
    if not value:
        raise WebhookSecretMissing(f"webhook secret {ref!r} is empty")
    return value


# ---------------------------------------------------------------- provisioning

#: The roles that verify other roles' workload tokens: they hold every role's public key.
WORKLOAD_RECEIVERS = frozenset({"runtime-api", "catalog"})


def provision_role_secrets(root: Path, names: Sequence[str]) -> dict[str, list[str]]:
    """Per-role secrets for deployments without `nexus up` (containers, Kubernetes).

    `root/<name>/` becomes exactly what role `name` mounts as its `<var>/secrets`: its own
    workload key pair in `workload/` (the private key 0600, only there) and, for the
    receivers, every provisioned role's public key beside it. Idempotent: existing keys are
    kept and the receivers' copies are refreshed. Returns the files written, per role.
    """
    root.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[str]] = {}
    for name in names:
        directory = _role_workload_dir(root, name)
        created = ensure_workload_keys(directory, [name])
        written[name] = [f"workload/{n}.key" for n in created]
    publics = {
        path.stem: path.read_bytes()
        for path in sorted(root.glob("*/workload/*.pub"))
        if path.stem == path.parent.parent.name
    }
    for receiver in sorted(WORKLOAD_RECEIVERS):
        if not (root / receiver).is_dir():
            continue
        directory = _role_workload_dir(root, receiver)
        for name, pem in publics.items():
            target = directory / f"{name}.pub"
            if not target.is_file() or target.read_bytes() != pem:
                target.write_bytes(pem)
                written.setdefault(receiver, []).append(f"workload/{name}.pub")
    return written


def _role_workload_dir(root: Path, name: str) -> Path:
    if not WEBHOOK_SECRET_REF.fullmatch(name):
        raise ValueError(f"not a role name: {name!r}")
    role_dir = root / name
    role_dir.mkdir(exist_ok=True)
    role_dir.chmod(0o700)
    directory = workload_key_dir(role_dir)
    directory.mkdir(exist_ok=True)
    directory.chmod(0o700)
    return directory


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give `root` and everything under it to uid:gid (a container's user)."""
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)
