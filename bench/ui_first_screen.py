#!/usr/bin/env python
"""How fast the browser CRM shows its first screens, in Debian's Chromium, on localhost.

    .venv/bin/python bench/ui_first_screen.py [--runs 10]

One `nexus up` stack on SQLite (tests/e2e/sfcrm_stack.py: the sfcrm objects, users rep1 and
viewer, an Account with Contacts). For each run, a NEW browser context (empty cache, no
session: the SPA keeps tokens in memory only, so every fresh tab starts at sign-in):

* sign-in screen: `goto(/r/Account/{id})` until the sign-in form's button is visible (SPA
  loads, sees no session, redirects to Identity's authorize page, which renders the form);
* first CRM screen: click "Sign in and allow" until the record page's heading is visible
  (authorization code + PKCE exchange, the record-ui call, render);
* list: click the Accounts tab until the list's first row is visible;
* warm reload of the record page (HTTP cache filled) until the sign-in form is visible again.

Times are wall clock in this process around Playwright waits that resolve on the next frame
(`locator.wait_for`), plus the browser's own First Contentful Paint of the first load.
Prints one JSON document: per measure p50 / p90 / max in ms over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright

from tests.conftest import Backend
from tests.e2e.browser_stack import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.sfcrm_stack import PASSWORD, sfcrm_stack


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 1),
        "max_ms": round(ordered[-1], 1),
    }


def account(stack: Any) -> str:
    reply = httpx.post(
        f"{stack.https}/services/data/v59.0/sobjects/Account",
        json={"Name": "First Screen Co"},
        headers={"Authorization": f"Bearer {stack.tokens['rep1']}"},
        verify=stack.tls(),
        timeout=10,
    )
    reply.raise_for_status()
    return str(reply.json()["id"])


def measure(stack: Any, runs: int) -> dict[str, Any]:
    record = f"{stack.http}/r/Account/{account(stack)}"
    times: dict[str, list[float]] = {k: [] for k in ("sign_in", "first_crm", "list", "warm")}
    fcp: list[float] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for run in range(runs + 1):  # run 0 warms the stack (imports, caches), not counted
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.set_default_timeout(15_000)
            started = time.perf_counter()
            page.goto(record)
            page.get_by_role("button", name="Sign in and allow").wait_for()
            sign_in = time.perf_counter() - started
            paint = page.evaluate(
                "() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"
            )
            page.get_by_label("Username").fill("rep1")
            page.get_by_label("Password").fill(PASSWORD)
            started = time.perf_counter()
            page.get_by_role("button", name="Sign in and allow").click()
            page.get_by_role("heading", name="First Screen Co").wait_for()
            first_crm = time.perf_counter() - started
            started = time.perf_counter()
            tabs = page.get_by_role("navigation", name="Objects")
            tabs.get_by_role("link", name="Accounts").click()
            page.get_by_role("link", name="First Screen Co").first.wait_for()
            listed = time.perf_counter() - started
            started = time.perf_counter()
            page.goto(record)
            page.get_by_role("button", name="Sign in and allow").wait_for()
            warm = time.perf_counter() - started
            context.close()
            if run == 0:
                continue
            for key, seconds in (
                ("sign_in", sign_in),
                ("first_crm", first_crm),
                ("list", listed),
                ("warm", warm),
            ):
                times[key].append(seconds * 1000)
            if paint:
                fcp.append(float(paint))
        browser.close()
    result: dict[str, Any] = {
        "sign_in_screen_cold": summary(times["sign_in"]),
        "first_crm_screen_after_sign_in": summary(times["first_crm"]),
        "list_view_in_app": summary(times["list"]),
        "sign_in_screen_warm_cache": summary(times["warm"]),
    }
    if fcp:
        result["first_contentful_paint_cold"] = summary(fcp)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if not (ROOT / "frontend" / "dist" / "index.html").is_file():
        raise SystemExit("build the browser CRM first: make frontend")
    load_before = os.getloadavg()[0]
    with (
        tempfile.TemporaryDirectory(prefix="nexus-ui-bench-") as tmp,
        sfcrm_stack(Path(tmp), Backend(name="sqlite")) as stack,
    ):
        results = measure(stack, args.runs)
    print(
        json.dumps(
            {
                "machine": f"{platform.machine()} {os.cpu_count()} cpu, "
                f"Python {platform.python_version()}",
                "load_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "runs": args.runs,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
