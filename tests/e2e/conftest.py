"""The browser suites' shared stack (`browser_stack.py`): one per session, stopped as soon as
the last module that uses it is done."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from tests.e2e.browser_stack import BrowserStack

SHARED = pytest.StashKey[BrowserStack]()
USERS = pytest.StashKey[set[str]]()  # modules with a test that uses the shared stack


@pytest.fixture(scope="session")
def browser_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrowserStack]:
    shared = BrowserStack(lambda: tmp_path_factory.mktemp("browser"))
    request.config.stash[SHARED] = shared
    yield shared
    shared.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[USERS] = {
        _module(item) for item in items if "browser_stack" in getattr(item, "fixturenames", ())
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    try:
        yield  # the module's own fixtures (pages, contexts) are torn down here
    finally:
        shared = item.config.stash.get(SHARED, None)
        users = item.config.stash.get(USERS, set())
        if shared is not None and (nextitem is None or _module(nextitem) not in users):
            shared.close()


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
