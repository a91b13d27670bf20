"""`make test-galera`: one 3-node MariaDB Galera cluster per session (tests/support/galera.py),
a database per test module, its URL on every node. Not part of `make test` (tests/conftest.py
leaves this folder out unless NEXUS_TEST_GALERA=1): the cluster needs `galera-4` and rsync,
and the target is run once per change to the work engine."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.support.galera import Galera, provider, start_galera
from tests.support.mariadb import find_server_binary


@pytest.fixture(scope="session")
def galera() -> Iterator[Galera]:
    binary = find_server_binary()
    if binary is None or provider() is None:
        pytest.fail("make test-galera needs mariadb-server, galera-4 and rsync")
    cluster = start_galera(binary)
    assert cluster.cluster_size() == 3
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def node_urls(request: pytest.FixtureRequest, galera: Galera) -> list[str]:
    """One database for the module: its URL on each of the three nodes."""
    name = "g_" + re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1])[:40]
    return galera.create_database(name)
