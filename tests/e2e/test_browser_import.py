"""CSV import and export in the browser CRM, in real Chromium (Debian's, driven by Playwright)
against one `nexus up` stack (SQLite): 1,000 rows with 10 bad ones go through the import
dialog while its progress bar advances; the error report names the 10 rows; the list view
exports to a CSV with the 990. Screenshots land in tests/e2e/screenshots/ (not committed)."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.browser_stack import BrowserStack
from tests.e2e.sfcrm_stack import PASSWORD, Stack
from tests.e2e.test_browser_crm import (
    NARROW,
    SHOTS,
    WIDE,
    _page,
    check_accessibility,
    sign_in,
)

pytestmark = pytest.mark.e2e
ROWS = 1_000
BAD = {50 + 100 * i for i in range(10)}  # 1-based data rows with a negative revenue
PREFIX = f"Imported {int(time.time())}"
IMPORT_TIMEOUT_MS = 120_000
FILTER_DEBOUNCE_MS = 300  # ListScreen waits this long after typing before it asks


def first_page(count: int, shown: int = 25) -> str:
    """The list pager's text on the first page of `count` records."""
    return f"1\N{EN DASH}{shown} of {count}"


@pytest.fixture(scope="module")
def stack(browser_stack: BrowserStack) -> Stack:
    return browser_stack.stack()  # shared with the other browser suites (browser_stack.py)


@pytest.fixture(scope="module")
def browser(browser_stack: BrowserStack) -> Browser:
    SHOTS.mkdir(exist_ok=True)
    return browser_stack.browser()


@pytest.fixture(scope="module")
def rep(browser: Browser, stack: Stack) -> Iterator[Page]:
    page = _page(browser)
    sign_in(page, stack, "/o/Account", "rep1", PASSWORD)
    expect(page.get_by_role("heading", name="All Accounts")).to_be_visible()
    yield page
    page.context.close()


def filter_list(page: Page, text: str) -> None:
    """Type into the list's filter and wait until the filtered page is shown."""
    page.get_by_label("Filter").fill(text)
    page.wait_for_timeout(FILTER_DEBOUNCE_MS + 100)
    expect(page.locator('[aria-busy="true"]')).to_have_count(0)


def accounts_csv() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["account name", "Industry", "Annual Revenue", "Notes"])
    for row in range(1, ROWS + 1):
        revenue = -1 if row in BAD else row * 10
        writer.writerow([f"{PREFIX} {row:04d}", "Technology", revenue, f"note, {row}"])
    return out.getvalue().encode()


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_import_1000_rows_with_10_bad_ones(rep: Page) -> None:
    rep.get_by_role("button", name="Import", exact=True).click()
    dialog = rep.get_by_role("dialog", name="Import Accounts")
    expect(dialog.get_by_role("button", name="Start import")).to_be_disabled()
    dialog.get_by_label("CSV file").set_input_files(
        {"name": "accounts.csv", "mimeType": "text/csv", "buffer": accounts_csv()}
    )
    # columns matched by API name or label, whatever the case; the rest skipped until mapped
    expect(dialog.get_by_label("Field for column account name")).to_have_value("Name")
    expect(dialog.get_by_label("Field for column Industry")).to_have_value("Industry")
    expect(dialog.get_by_label("Field for column Annual Revenue")).to_have_value("AnnualRevenue")
    notes = dialog.get_by_label("Field for column Notes")
    expect(notes).to_have_value("")
    notes.select_option("Description")
    check_accessibility(rep, "import mapping")
    _shot(rep, "import-mapping")

    dialog.get_by_role("button", name="Start import").click()
    bar = dialog.get_by_role("progressbar", name="Import progress")
    expect(bar).to_be_visible()
    # the stack pauses between the job's chunks of 100 rows (IMPORT_CHUNK_PAUSE_MS): the bar
    # has steps to see however fast the machine is, and the check still fails if none shows
    seen: list[int] = []
    deadline = time.monotonic() + IMPORT_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        seen.append(int(bar.get_attribute("aria-valuenow") or 0))
        if seen[-1] == 100:
            break
        if 0 < seen[-1] < 100 and not any(0 < v < 100 for v in seen[:-1]):
            _shot(rep, "import-progress")
        time.sleep(0.1)
    (SHOTS / "import-progress.json").write_text(json.dumps({"rows": ROWS, "steps": seen}))
    assert seen[-1] == 100, seen
    assert seen == sorted(seen), f"the bar went backwards: {seen}"
    assert any(0 < v < 100 for v in seen), f"no step between 0 and 100: {sorted(set(seen))}"

    expect(dialog.get_by_text("Import finished: 990 imported, 10 failed")).to_be_visible(
        timeout=IMPORT_TIMEOUT_MS
    )
    _shot(rep, "import-done")
    with rep.expect_download() as download:
        dialog.get_by_role("button", name="Download error report (10 rows)").click()
    report = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    assert report[0] == ["Row", "Error"]
    assert {int(row) for row, _ in report[1:]} == BAD
    assert all("revenue cannot be negative" in error for _, error in report[1:])
    dialog.locator("footer").get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()

    filter_list(rep, PREFIX)
    expect(rep.get_by_text(first_page(990))).to_be_visible()
    rep.get_by_role("link", name=f"{PREFIX} 0001").click()
    expect(rep.get_by_role("heading", name=f"{PREFIX} 0001")).to_be_visible()
    expect(rep.locator('[data-field="Description"] dd')).to_have_text("note, 1")
    expect(rep.locator('[data-field="AnnualRevenue"] dd')).to_contain_text("10")


def test_export_the_list_view(rep: Page) -> None:
    rep.get_by_role("navigation", name="Objects").get_by_role("link", name="Accounts").click()
    expect(rep.get_by_role("heading", name="All Accounts")).to_be_visible()
    filter_list(rep, PREFIX)
    expect(rep.get_by_text(first_page(990))).to_be_visible()
    with rep.expect_download() as download:
        rep.get_by_role("button", name="Export").click()
    assert download.value.suggested_filename == "All Accounts.csv"
    rows = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    header, data = rows[0], rows[1:]
    assert header[0] == "Account Name"
    names = {row[0] for row in data}
    assert names == {f"{PREFIX} {r:04d}" for r in range(1, ROWS + 1) if r not in BAD}
    _shot(rep, "import-list-export")


def test_recently_viewed_lists_the_records_opened(rep: Page) -> None:
    recent = rep.get_by_role("navigation", name="Recently viewed")
    for row in (2, 3):
        rep.get_by_role("navigation", name="Objects").get_by_role("link", name="Accounts").click()
        filter_list(rep, f"{PREFIX} {row:04d}")
        rep.get_by_role("link", name=f"{PREFIX} {row:04d}").click()
        expect(rep.get_by_role("heading", name=f"{PREFIX} {row:04d}")).to_be_visible()
    links = recent.get_by_role("link")
    expect(links.nth(0)).to_contain_text(f"{PREFIX} 0003")
    expect(links.nth(1)).to_contain_text(f"{PREFIX} 0002")
    expect(links.nth(2)).to_contain_text(f"{PREFIX} 0001")  # opened by the import test
    _shot(rep, "import-recently-viewed")
    links.nth(1).click()
    expect(rep.get_by_role("heading", name=f"{PREFIX} 0002")).to_be_visible()
    expect(links.nth(0)).to_contain_text(f"{PREFIX} 0002")
    # in memory only: nothing of it in web storage
    stored = rep.evaluate("() => localStorage.length + sessionStorage.length")
    assert stored == 0


def test_delete_then_restore_from_the_recycle_bin(rep: Page) -> None:
    name = f"{PREFIX} 0002"
    rep.get_by_role("button", name="Delete").click()
    rep.get_by_role("dialog", name="Delete Account?").get_by_role("button", name="Delete").click()
    expect(rep.get_by_text(f'Account "{name}" deleted')).to_be_visible()
    expect(rep.get_by_role("navigation", name="Recently viewed")).not_to_contain_text(name)
    filter_list(rep, PREFIX)
    expect(rep.get_by_text(first_page(989))).to_be_visible()
    rep.get_by_role("button", name="Recycle bin").click()
    bin_dialog = rep.get_by_role("dialog", name="Deleted Accounts")
    expect(bin_dialog.get_by_text(name)).to_be_visible()
    check_accessibility(rep, "recycle bin")
    bin_dialog.get_by_role("button", name=f"Restore {name}").click()
    expect(rep.get_by_text(f'Account "{name}" restored')).to_be_visible()
    expect(bin_dialog.get_by_text(name)).to_have_count(0)
    bin_dialog.locator("footer").get_by_role("button", name="Close").click()
    expect(rep.get_by_text(first_page(990))).to_be_visible()


def test_upsert_by_external_id_updates_and_inserts(rep: Page) -> None:
    def run(rows: list[tuple[str, str, str]]) -> None:
        body = "Customer Id,Account Name,Billing City\n" + "".join(
            f"{r},{n},{c}\n" for r, n, c in rows
        )
        rep.get_by_role("button", name="Import", exact=True).click()
        dialog = rep.get_by_role("dialog", name="Import Accounts")
        dialog.get_by_label("Update or insert, matched by an external id").check()
        dialog.get_by_label("External id field").select_option("External_Customer_Id__c")
        dialog.get_by_label("CSV file").set_input_files(
            {"name": "customers.csv", "mimeType": "text/csv", "buffer": body.encode()}
        )
        dialog.get_by_label("Field for column Customer Id").select_option("External_Customer_Id__c")
        dialog.get_by_role("button", name="Start import").click()
        done = f"Import finished: {len(rows)} imported, 0 failed"
        expect(dialog.get_by_text(done)).to_be_visible(timeout=IMPORT_TIMEOUT_MS)
        dialog.locator("footer").get_by_role("button", name="Close").click()

    name = f"{PREFIX} upsert"
    run([(f"{PREFIX}-c1", name, "Leeds")])
    run([(f"{PREFIX}-c1", name, "York"), (f"{PREFIX}-c2", f"{name} two", "Bath")])
    filter_list(rep, name)
    expect(rep.get_by_text(first_page(2, shown=2))).to_be_visible()
    rep.get_by_role("link", name=name, exact=True).click()
    expect(rep.locator('[data-field="BillingCity"] dd')).to_have_text("York")


def fits(page: Page, screen: str) -> None:
    """Nothing sticks out to the right of a narrow window (named when something does)."""
    wider = page.evaluate(
        """(limit) => {
             const clipped = (e) => {
               for (let p = e.parentElement; p; p = p.parentElement) {
                 const s = getComputedStyle(p);
                 if (s.overflowX !== 'visible' || s.position === 'fixed') return true;
               }
               return false;
             };
             return [...document.querySelectorAll('body *')]
               .filter(e => e.getBoundingClientRect().right > limit + 1 && !clipped(e))
               .slice(0, 5).map(e => e.tagName + '.' + e.className);
           }""",
        NARROW["width"],
    )
    width = page.evaluate("() => document.documentElement.scrollWidth")
    if width > NARROW["width"]:
        (SHOTS / f"narrow-{screen}.html").write_text(page.content())
    assert width <= NARROW["width"], f"{screen} scrolls sideways at {NARROW['width']}px: {wider}"


def test_list_and_import_dialog_fit_a_narrow_window(rep: Page) -> None:
    rep.set_viewport_size(NARROW)
    try:
        rep.get_by_role("navigation", name="Objects").get_by_role("link", name="Accounts").click()
        expect(rep.get_by_role("button", name="Recycle bin")).to_be_visible()
        expect(rep.locator("table.table tbody tr").first).to_be_visible()
        fits(rep, "list")
        rep.get_by_role("button", name="Import", exact=True).click()
        dialog = rep.get_by_role("dialog", name="Import Accounts")
        dialog.get_by_label("CSV file").set_input_files(
            {"name": "a.csv", "mimeType": "text/csv", "buffer": accounts_csv()[:2000]}
        )
        expect(dialog.get_by_label("Field for column account name")).to_have_value("Name")
        fits(rep, "import dialog")
        check_accessibility(rep, "import dialog (narrow)")
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_be_hidden()
    finally:
        rep.set_viewport_size(WIDE)
