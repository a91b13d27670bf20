"""Local secrets: generated once, private to the owner, never logged; required in production."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from nexus.platform.secrets import (
    WORKLOAD_SECRET_FILE,
    ensure_local_secrets,
    secrets_dir,
    workload_secret,
)
from nexus.platform.settings import SettingsError, load_settings


def test_generated_once_with_owner_only_permissions(tmp_path: Path) -> None:
    created = ensure_local_secrets(tmp_path)
    assert created == [WORKLOAD_SECRET_FILE]
    directory = secrets_dir(tmp_path)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    contents = {}
    for name in created:
        path = directory / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        contents[name] = path.read_bytes()
    assert len(contents[WORKLOAD_SECRET_FILE]) == 64

    assert ensure_local_secrets(tmp_path) == []  # second start: nothing regenerated
    assert {n: (directory / n).read_bytes() for n in created} == contents
    assert not list(directory.glob(".*.tmp"))


def test_workload_secret_comes_from_the_file_in_development(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path, env="development")
    secret = workload_secret(settings)
    assert secret == (secrets_dir(tmp_path) / WORKLOAD_SECRET_FILE).read_bytes().strip()


def test_production_requires_an_explicit_workload_secret(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path, env="production", workload_secret=None)
    with pytest.raises(SettingsError, match="NEXUS_WORKLOAD_SECRET: required"):
        workload_secret(settings)
    assert not secrets_dir(tmp_path).exists()
    explicit = load_settings(var_dir=tmp_path, env="production", workload_secret="s" * 40)
    assert workload_secret(explicit) == b"s" * 40
