"""One `nexus up` stack (SQLite) and one Chromium shared by the browser suites
(`test_browser_*.py`). Starting a stack costs ~25-30 s on two cores, so the suites share one
and keep their data apart by names and users (timestamped record names, their own users),
not by stacks. Both start when the first test asks for them and stop after the last test of
the last module that uses them (`tests/e2e/conftest.py`): no idle stack runs under the suites
that follow."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.conftest import Backend
from tests.e2e.sfcrm_stack import Stack, sfcrm_stack

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "frontend" / "dist" / "index.html"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STALENESS = 1.0  # the stack's max_security_staleness_seconds (revocations seen within it)
IMPORT_CHUNK_PAUSE_MS = 150  # an import's chunks are this far apart: its progress bar has steps


def missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI requires {what}")
    pytest.skip(what)


class BrowserStack:
    """The shared stack and browser, each started on first use; `close` stops both."""

    def __init__(self, folder: Callable[[], Path]) -> None:
        self._folder = folder
        self._exit = ExitStack()
        self._stack: Stack | None = None
        self._browser: Browser | None = None

    def stack(self) -> Stack:
        if not DIST.is_file():
            pytest.fail("the browser CRM is not built: run `make frontend`")
        if self._stack is None:
            self._stack = self._exit.enter_context(
                sfcrm_stack(
                    self._folder(),
                    Backend(name="sqlite"),
                    NEXUS_MAX_SECURITY_STALENESS_SECONDS=str(STALENESS),
                    NEXUS_IMPORT_CHUNK_PAUSE_MS=str(IMPORT_CHUNK_PAUSE_MS),
                )
            )
        return self._stack

    def browser(self) -> Browser:
        if not Path(CHROMIUM).exists():
            missing("Chromium at /usr/bin/chromium (apt-get install chromium)")
        if self._browser is None:
            driver = self._exit.enter_context(sync_playwright())
            launched = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            self._exit.callback(launched.close)
            self._browser = launched
        return self._browser

    def close(self) -> None:
        self._stack = self._browser = None
        self._exit.close()
