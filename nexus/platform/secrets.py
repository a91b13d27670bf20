"""Local secrets, generated on first start into `<var>/secrets/` (directory 0700, keys 0600).

Development generates what is missing; production (`NEXUS_ENV=production`) requires every
secret to be provisioned and fails at start, naming the missing file. Contents are never
logged; only names are.
"""

from __future__ import annotations

from pathlib import Path

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
