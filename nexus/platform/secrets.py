"""Local secrets for development stacks, generated on first start into `<var>/secrets/`.

Files are created with mode 0600 inside a 0700 directory, written to a temporary name and
linked into place, so a crash never leaves a half-written secret and a concurrent starter
never overwrites one. Their contents are never logged; only their names are.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from nexus.platform.observability import get_logger
from nexus.platform.settings import Settings, SettingsError

WORKLOAD_SECRET_FILE = "workload.key"  # noqa: S105  (a file name, not a secret)

log = get_logger(__name__)


def secrets_dir(var_dir: Path) -> Path:
    return var_dir / "secrets"


def _new_workload_secret() -> bytes:
    return secrets.token_hex(32).encode()


def _ensure_file(path: Path, generate: Callable[[], bytes]) -> bool:
    """Create `path` (0600) with generated content unless it exists. True when created."""
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(generate())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)


def ensure_local_secrets(var_dir: Path) -> list[str]:
    """Generate missing local secrets; returns the names of those created."""
    directory = secrets_dir(var_dir)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    created = [
        name
        for name, generate in ((WORKLOAD_SECRET_FILE, _new_workload_secret),)
        if _ensure_file(directory / name, generate)
    ]
    if created:
        log.info("secrets.generated", names=created, directory=str(directory))
    return created


def workload_secret(settings: Settings) -> bytes:
    """The shared secret roles use to prove their workload identity to one another.

    Production requires NEXUS_WORKLOAD_SECRET; development falls back to the generated file.
    """
    configured = settings.secrets.workload_secret
    if configured is not None:
        return configured.get_secret_value().encode()
    if settings.core.env == "production":
        raise SettingsError("NEXUS_WORKLOAD_SECRET: required when NEXUS_ENV=production")
    ensure_local_secrets(settings.var_dir)
    return (secrets_dir(settings.var_dir) / WORKLOAD_SECRET_FILE).read_bytes().strip()
