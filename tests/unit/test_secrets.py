"""Local secrets: generated once, private to the owner, never logged; required in production."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from joserfc import jwt

from nexus.platform.secrets import ensure_local_secrets, secrets_dir, workload_signer
from nexus.platform.settings import SettingsError, load_settings
from nexus.platform.workload import load_public_keys, workload_key_dir


def test_workload_keys_are_generated_once_with_owner_only_permissions(tmp_path: Path) -> None:
    created = ensure_local_secrets(tmp_path, ["catalog", "app-sfcrm"])
    assert created == ["catalog", "app-sfcrm"]
    directory = workload_key_dir(secrets_dir(tmp_path))
    assert stat.S_IMODE(secrets_dir(tmp_path).stat().st_mode) == 0o700
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    before = {}
    for name in created:
        private = directory / f"{name}.key"
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
        before[name] = private.read_bytes()
    assert ensure_local_secrets(tmp_path, ["catalog", "app-sfcrm"]) == []
    assert {n: (directory / f"{n}.key").read_bytes() for n in created} == before
    assert not list(directory.glob(".*.tmp"))


def test_a_workload_token_verifies_with_the_published_key(tmp_path: Path) -> None:
    signer = workload_signer(load_settings(var_dir=tmp_path), "integration")
    token = signer.token("runtime-api")
    public = load_public_keys(workload_key_dir(secrets_dir(tmp_path)))["integration"]
    claims = jwt.decode(token, public, algorithms=["ES256"]).claims
    assert claims["iss"] == "integration"
    assert claims["aud"] == "runtime-api"
    assert claims["exp"] - claims["iat"] <= 60


def test_production_requires_provisioned_workload_keys(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path, env="production")
    with pytest.raises(SettingsError, match="NEXUS_VAR_DIR: no workload key for 'catalog'"):
        workload_signer(settings, "catalog")
    ensure_local_secrets(tmp_path, ["catalog"])
    assert workload_signer(settings, "catalog").name == "catalog"
