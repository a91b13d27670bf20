"""Session-wide fixtures: one MariaDB server per test session, a schema per test module.

Every database test runs on both backends through the module-scoped `backend` fixture. When
the server binary is missing, MariaDB cases skip with the reason; with `CI` set, a missing
binary fails them instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nexus.contracts.roles import LogicalService
from tests.support.mariadb import MariaDB, find_server_binary, start_mariadb

BACKENDS = ("sqlite", "mariadb")

#: The Galera suite runs as its own target (`make test-galera`), not in every test session.
collect_ignore = [] if os.environ.get("NEXUS_TEST_GALERA") == "1" else ["galera"]


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDB]:
    binary = find_server_binary()
    if binary is None:
        reason = "mariadbd/mysqld not found (apt-get install mariadb-server)"
        if os.environ.get("CI"):
            pytest.fail(f"CI requires MariaDB: {reason}")
        pytest.skip(reason)
    server = start_mariadb(binary)
    yield server
    server.stop()


@dataclass
class Backend:
    """Databases of one test module on one backend: one per logical service."""

    name: str
    urls: dict[LogicalService, str] = field(default_factory=dict)

    def url(self, service: LogicalService = LogicalService.RUNTIME) -> str:
        return self.urls[service]

    def env(self) -> dict[str, str]:
        return {f"NEXUS_{s.value.upper()}_DATABASE_URL": u for s, u in self.urls.items()}


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    module = re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1])[:40]
    result = Backend(name=request.param)
    if request.param == "sqlite":
        folder: Path = tmp_path_factory.mktemp(f"sqlite-{module}")
        for service in LogicalService:
            result.urls[service] = f"sqlite+aiosqlite:///{folder / service.value}.sqlite3"
        return result
    server: MariaDB = request.getfixturevalue("mariadb_server")
    for service in LogicalService:
        result.urls[service] = server.create_database(f"t_{module}_{service.value}")
    return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`mariadb_only` tests are not collected for SQLite (deselected, never skipped)."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        sqlite = callspec is not None and callspec.params.get("backend") == "sqlite"
        (dropped if sqlite and item.get_closest_marker("mariadb_only") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say plainly how many MariaDB-backed tests ran, so a silent skip cannot pass unseen."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            if "[mariadb" in getattr(report, "nodeid", "") and report.when in ("call", "setup"):
                if outcome == "passed" and report.when != "call":
                    continue
                counts[outcome] = counts.get(outcome, 0) + 1
    summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none collected"
    terminalreporter.write_line(f"MariaDB-backed tests: {summary}")
