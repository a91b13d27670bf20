"""Settings: defaults, derived values, and one-line errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus.contracts.roles import ROLE_PORT_OFFSET, LogicalService, Role
from nexus.platform.settings import SettingsError, env_var_names, load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in env_var_names():
        monkeypatch.delenv(name, raising=False)


def test_defaults_put_each_service_in_its_own_sqlite_file(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path)
    urls = {settings.database_url(s) for s in LogicalService}
    assert len(urls) == len(LogicalService)
    for service in LogicalService:
        assert settings.database_url(service) == (
            f"sqlite+aiosqlite:///{(tmp_path / service.value).resolve()}.sqlite3"
        )


def test_ports_follow_the_documented_order_from_the_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_PORT_BASE", "9100")
    settings = load_settings()
    assert settings.port_for(Role.GATEWAY) == 9100
    assert [settings.port_for(r) for r in Role] == [9100 + ROLE_PORT_OFFSET[r] for r in Role]
    assert len({settings.port_for(r) for r in Role}) == len(Role)
    assert settings.upstream_url("app:sfcrm") == f"http://127.0.0.1:{9100 + 5}"
    assert settings.public_base_url == "http://127.0.0.1:9100"


def test_explicit_upstream_urls_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_RUNTIME_API_URL", "http://runtime-api:8001/")
    assert load_settings().upstream_url("runtime-api") == "http://runtime-api:8001"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("NEXUS_PORT_BASE", "eighty", "NEXUS_PORT_BASE: Input should be a valid integer"),
        ("NEXUS_PORT_BASE", "70000", "NEXUS_PORT_BASE: Input should be less than or equal"),
        ("NEXUS_LOG_LEVEL", "loud", "NEXUS_LOG_LEVEL: Input should be"),
        ("NEXUS_RUNTIME_DATABASE_URL", "not a url", "NEXUS_RUNTIME_DATABASE_URL: malformed"),
        ("NEXUS_CATALOG_DATABASE_URL", "postgresql://u:p@h/db", "unsupported database driver"),
        ("NEXUS_INTEGRATION_DATABASE_URL", "mysql+aiomysql://u:p@/", "needs a host"),
        ("NEXUS_CATALOG_URL", "ftp://x", "NEXUS_CATALOG_URL: Value error, must be an http"),
    ],
)
def test_invalid_settings_are_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(variable)
    assert expected.split(": ", 1)[-1].removeprefix("Value error, ") in message


def test_database_url_errors_never_echo_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_RUNTIME_DATABASE_URL", "mysql://admin:hunter2-secret@db/x")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "hunter2-secret" not in str(caught.value)


def test_env_var_names_cover_every_field() -> None:
    names = env_var_names()
    assert {"NEXUS_VAR_DIR", "NEXUS_PORT_BASE", "NEXUS_LOG_LEVEL"} <= names
    assert {f"NEXUS_{s.value.upper()}_DATABASE_URL" for s in LogicalService} <= names
    assert "NEXUS_GATEWAY_BODY_LIMIT_BYTES" in names
