"""The admin console in real Chromium (Debian's, driven by Playwright) against one `nexus up`
stack (SQLite): a signed webhook becomes a record in the CRM list; one whose mapped command
Runtime refuses lands in the Integration dead letters, where an operator sees the sanitized
failure with its delivery, has a replay refused while the route's mapping differs (the
fail-closed reason is shown), fixes the route and the missing field, replays it in the browser
and sees the record; an administrator creates a user and a custom field; a user who is not a
System Administrator gets a clear "not allowed". axe-core on the admin screens; screenshots in
tests/e2e/screenshots/admin/ (not committed)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import Browser, FilePayload, Page, expect

from tests.e2e.browser_stack import BrowserStack
from tests.e2e.sfcrm_stack import ADMIN_PASSWORD, PASSWORD, Stack
from tests.e2e.test_browser_crm import (
    SHOTS,
    WIDE,
    check_accessibility,
    shot,
    sign_in,
)

pytestmark = pytest.mark.e2e
TAG = str(int(time.time()))[-6:]
APPS = Path(__file__).parents[1] / "fixtures" / "apps"
TIER = f"Tier{TAG}"


def route(*, tier: bool) -> dict[str, Any]:
    fields = {"External_Id__c": "/data/id", "LastName": "/data/last_name"}
    if tier:
        fields["Loyalty_Tier__c"] = "/data/tier"
    return {
        "routes": [
            {
                "connector": "crm-demo",
                "route": "contacts",
                "signature": {"scheme": "standard_webhooks"},
                "secrets": ["crm-demo-contacts"],
                "event_kind": {"pointer": "/type"},
                "command": {
                    "op": "upsert",
                    "object": "Contact",
                    "external_id_field": "External_Id__c",
                    "fields": fields,
                },
            }
        ]
    }


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser-admin")


@pytest.fixture(scope="module")
def stack(where: Path, browser_stack: BrowserStack) -> Stack:
    running = browser_stack.stack()  # shared with the other browser suites (browser_stack.py)
    running.nexus(
        "admin",
        "assign-permission-set",
        "--username",
        "integration",
        "--permission-set",
        "Sfcrm_Test_Sales",
    )
    running.nexus("hooks", "set-secret", "crm-demo-contacts", "--generate")
    apply_routes(running, where, route(tier=True))
    return running


def apply_routes(stack: Stack, where: Path, routes: dict[str, Any]) -> str:
    path = where / f"routes-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(routes))
    return stack.nexus("integration", "apply-routes", str(path))


def send(
    stack: Stack, where: Path, delivery: str, body: dict[str, Any], *, route: str = "contacts"
) -> None:
    path = where / f"{delivery}.json"
    path.write_text(json.dumps(body))
    out = stack.nexus(
        "hooks", "send", "--connector", "crm-demo", "--route", route,
        "--delivery-id", delivery, str(path),
    )  # fmt: skip
    assert "status: 200" in out, out


@pytest.fixture(scope="module")
def browser(browser_stack: BrowserStack) -> Browser:
    launched = browser_stack.browser()
    (SHOTS / "admin").mkdir(parents=True, exist_ok=True)  # the CRM suite clears SHOTS/*.png
    for old in (SHOTS / "admin").glob("*.png"):
        old.unlink()
    return launched


@pytest.fixture(scope="module")
def admin(browser: Browser, stack: Stack) -> Iterator[Page]:
    context = browser.new_context(viewport=WIDE, bypass_csp=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    sign_in(page, stack, "/admin/integration", "admin", ADMIN_PASSWORD)
    yield page
    context.close()


def open_section(page: Page, label: str) -> None:
    if not page.get_by_role("navigation", name="Administration").count():
        page.get_by_role("link", name="Admin", exact=True).click()
    page.get_by_role("navigation", name="Administration").get_by_role("link", name=label).click()
    expect(page.get_by_role("heading", level=1, name=label)).to_be_visible()


def contact_list(page: Page, name: str, *, timeout: float = 30_000) -> None:
    """The CRM's Contact list shows `name` (reloaded until the worker has saved it)."""
    deadline = time.monotonic() + timeout / 1000
    page.get_by_role("navigation", name="Objects").get_by_role("link", name="Contacts").click()
    while True:
        expect(page.get_by_role("heading", name="All Contacts")).to_be_visible()
        if page.get_by_role("link", name=name).count() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
        page.get_by_role("navigation", name="Objects").get_by_role("link", name="Accounts").click()
        expect(page.get_by_role("heading", name="All Accounts")).to_be_visible()
        page.get_by_role("navigation", name="Objects").get_by_role("link", name="Contacts").click()
    expect(page.get_by_role("link", name=name)).to_be_visible()


def test_a_signed_webhook_becomes_a_record_in_the_crm(
    admin: Page, stack: Stack, where: Path
) -> None:
    expect(admin.get_by_role("heading", level=1, name="Integration")).to_be_visible()
    send(
        stack,
        where,
        f"ok-{TAG}",
        {"type": "contact.created", "data": {"id": f"ok-{TAG}", "last_name": f"Hopper{TAG}"}},
    )
    contact_list(admin, f"Hopper{TAG}")


def test_a_refused_command_is_a_dead_letter_replayed_after_the_fix(
    admin: Page, stack: Stack, where: Path
) -> None:
    delivery = f"tier-{TAG}"
    card = "4111111111111111"
    send(
        stack,
        where,
        delivery,
        {
            "type": "contact.created",
            "data": {"id": delivery, "last_name": f"Lamarr{TAG}", "tier": TIER, "card": card},
        },
    )
    admin.get_by_role("link", name="Admin", exact=True).click()
    dead = admin.get_by_role("region", name="Dead letters")
    row = dead.get_by_role("row").filter(has_text=delivery)
    deadline = time.monotonic() + 30
    while not row.count() and time.monotonic() < deadline:
        time.sleep(1)
        dead.get_by_role("button", name="Filter").click()
    expect(row).to_contain_text("crm-demo/contacts v1")
    expect(row).to_contain_text("Runtime answered 400")  # sanitized: class and short message
    shown = admin.content()
    assert card not in shown  # never the payload
    assert TIER not in shown
    expect(
        admin.get_by_role("region", name="Queues").get_by_label("routes:crm-demo / contacts")
    ).to_be_visible()
    check_accessibility(admin, "admin integration")
    shot(admin, "admin/integration-dlq")

    # the route's mapping changes: a replay would not send what the event was routed by
    apply_routes(stack, where, route(tier=False))
    row.get_by_role("button", name=re.compile("^Replay ")).click()
    refusal = dead.get_by_role("alert")
    expect(refusal).to_contain_text("ROUTE_CHANGED")
    expect(refusal).to_contain_text("command mapping changed since version 1")
    shot(admin, "admin/integration-refused")

    # the fix: the route maps the tier as before, and Contact gets the field it names
    apply_routes(stack, where, route(tier=True))
    add_field(admin, "Contact", "Loyalty Tier", "Loyalty_Tier")
    open_section(admin, "Integration")
    dead = admin.get_by_role("region", name="Dead letters")
    row = dead.get_by_role("row").filter(has_text=delivery)
    row.get_by_role("button", name=re.compile("^Replay ")).click()
    expect(admin.get_by_text("Replay: 1 done, 0 refused")).to_be_visible()
    expect(dead.get_by_text("No dead letters")).to_be_visible()
    contact_list(admin, f"Lamarr{TAG}")


def people_route(id_pointer: str) -> dict[str, Any]:
    """A second route of the demo connector whose external id comes from `id_pointer`."""
    declaration = route(tier=False)["routes"][0]
    fields = {"External_Id__c": id_pointer, "LastName": "/data/last_name"}
    command = declaration["command"] | {"fields": fields}
    return {"routes": [declaration | {"route": "people", "command": command}]}


def until_listed(region: Any, text: str, *, timeout: float = 30) -> Any:
    """The row of `region` holding `text`, re-filtering until the router has put it there."""
    row = region.get_by_role("row").filter(has_text=text)
    deadline = time.monotonic() + timeout
    while not row.count() and time.monotonic() < deadline:
        time.sleep(1)
        region.get_by_role("button", name="Filter").click()
    return row


def test_a_delivery_that_fails_mapping_is_replayed_through_the_fixed_route(
    admin: Page, browser: Browser, stack: Stack, where: Path
) -> None:
    apply_routes(stack, where, people_route("/data/id"))
    ok = f"person-ok-{TAG}"
    first = {"id": ok, "last_name": f"Curie{TAG}"}
    send(stack, where, ok, {"type": "person.created", "data": first}, route="people")
    contact_list(admin, f"Curie{TAG}")

    # the provider renamed `id` to `person_id`: the route's pointer finds nothing
    delivery, ssn = f"person-new-{TAG}", "078-05-1120"
    body = {"person_id": delivery, "last_name": f"Meitner{TAG}", "ssn": ssn}
    send(stack, where, delivery, {"type": "person.created", "data": body}, route="people")
    open_section(admin, "Integration")
    failed = admin.get_by_role("region", name="Failed deliveries")
    row = until_listed(failed, delivery)
    expect(row).to_contain_text("crm-demo/people")
    expect(row).to_contain_text("no text or integer at /data/id")  # sanitized: the pointer
    assert ssn not in admin.content()  # never the payload
    check_accessibility(admin, "admin failed deliveries")
    shot(admin, "admin/failed-deliveries")

    # a second operator has the same list open
    context = browser.new_context(viewport=WIDE, bypass_csp=True)
    context.set_default_timeout(15_000)
    other = context.new_page()
    try:
        sign_in(other, stack, "/admin/integration", "admin", ADMIN_PASSWORD)
        theirs = other.get_by_role("region", name="Failed deliveries")
        stale = until_listed(theirs, delivery)

        # the fix, as an operator applies it; then the replay routes it with version 2
        apply_routes(stack, where, people_route("/data/person_id"))
        row.get_by_role("button", name=f"Replay delivery {delivery}").click()
        expect(admin.get_by_text("Replay delivery: 1 routed again, 0 refused")).to_be_visible()
        expect(failed.get_by_role("row").filter(has_text=delivery)).to_have_count(0)
        contact_list(admin, f"Meitner{TAG}")

        # the second operator's replay comes too late: refused, with the reason shown
        stale.get_by_role("button", name=f"Replay delivery {delivery}").click()
        refusal = theirs.get_by_role("alert")
        expect(refusal).to_contain_text(f"{delivery}: ")
        expect(refusal).to_contain_text("(not failed) (NOT_FAILED)")
        shot(other, "admin/failed-deliveries-refused")
    finally:
        context.close()


def add_field(page: Page, object_label: str, label: str, api_name: str) -> None:
    open_section(page, "Metadata")
    form = page.get_by_role("region", name="Add a custom field")
    form.get_by_label("Object").select_option(label=object_label)
    form.get_by_label("Field label").fill(label)
    form.get_by_label("Field API name").fill(api_name)
    form.get_by_role("button", name="Add field").click()
    expect(page.get_by_text(f"{object_label}.{api_name}__c added")).to_be_visible()


def test_an_admin_adds_a_custom_field_usable_in_the_crm_at_once(admin: Page) -> None:
    add_field(admin, "Account", "Region Code", "Region_Code")
    check_accessibility(admin, "admin metadata")
    shot(admin, "admin/metadata")
    admin.get_by_role("navigation", name="Objects").get_by_role("link", name="Accounts").click()
    admin.get_by_role("button", name="New", exact=True).click()
    dialog = admin.get_by_role("dialog", name="New Account")
    expect(dialog.get_by_label("Region Code")).to_be_visible()
    dialog.get_by_label("Account Name").fill(f"Regional {TAG}")
    dialog.get_by_label("Region Code").fill("EMEA-7")
    dialog.get_by_role("button", name="Save").click()
    expect(admin.get_by_role("heading", name=f"Regional {TAG}")).to_be_visible()
    expect(admin.locator('[data-field="Region_Code__c"] dd')).to_contain_text("EMEA-7")


def test_an_admin_creates_a_user_who_can_sign_in(admin: Page, stack: Stack) -> None:
    open_section(admin, "Users & access")
    admin.get_by_role("button", name="New user").click()
    dialog = admin.get_by_role("dialog", name="New user")
    username = f"newhire{TAG}"
    dialog.get_by_label("Username").fill(username)
    dialog.get_by_label("Display name").fill("New Hire")
    dialog.get_by_label("Permission set").select_option(label="Sales (tests)")
    check_accessibility(admin, "admin new user")
    dialog.get_by_role("button", name="Create").click()
    shown = admin.get_by_role("dialog", name=f"Password for {username}")
    password = shown.get_by_role("status").inner_text().strip()
    assert len(password) >= 16
    shown.get_by_role("button", name="Done").click()
    row = admin.get_by_role("row").filter(has_text=username)
    expect(row).to_contain_text("Sfcrm_Test_Sales")
    expect(row).to_contain_text("Active")
    check_accessibility(admin, "admin users")
    shot(admin, "admin/users")
    assert stack.token(username, password)  # the password shown once works


def bundle(app: str) -> FilePayload:
    """A package directory as the console uploads it: a JSON `{path: text}` file."""
    root = APPS / app
    files = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.yaml")}
    return {
        "name": f"{app}.json",
        "mimeType": "application/json",
        "buffer": json.dumps(files).encode(),
    }


def install(page: Page, app: str, app_id: str) -> None:
    page.get_by_label("Package file").set_input_files(bundle(app))
    steps = page.get_by_role("list", name=f"install of {app_id}")  # ticks live while it runs
    expect(steps.locator("li.step-done", has_text="ACTIVE")).to_be_visible(timeout=60_000)
    expect(page.get_by_role("row").filter(has_text=app_id)).to_contain_text("1.0.0")


SFCRM_VERSION = str(
    yaml.safe_load((APPS.parents[2] / "nexus/apps/sfcrm/package/manifest.yaml").read_text())[
        "version"
    ]
)


def test_the_catalog_installs_and_refuses_an_uninstall_others_depend_on(admin: Page) -> None:
    open_section(admin, "Apps")
    row = admin.get_by_role("row").filter(has_text="sfcrm")
    expect(row).to_contain_text(SFCRM_VERSION)
    expect(row).to_contain_text("sha256:")
    install(admin, "issue_tracker", "issue-tracker")
    install(admin, "tracker_sla", "tracker-sla")
    admin.get_by_role("button", name="Uninstall issue-tracker").click()
    refused = admin.get_by_role("region", name="Install a package").get_by_role("alert")
    expect(refused).to_contain_text("installed Apps depend on issue-tracker: tracker-sla")
    expect(admin.get_by_role("row").filter(has_text="issue-tracker")).to_be_visible()
    check_accessibility(admin, "admin catalog")
    shot(admin, "admin/catalog")


def bulk_api(stack: Stack, token: str, method: str, path: str, **kwargs: Any) -> Any:
    """The Bulk API 2.0 through the gateway over HTTPS, as a Salesforce client calls it."""
    headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    url = f"{stack.https}/services/data/v59.0/jobs/ingest{path}"
    reply = httpx.request(method, url, headers=headers, verify=stack.tls(), timeout=30, **kwargs)
    assert reply.status_code in (200, 201), reply.text
    return reply.json() if reply.content else None


def test_a_bulk_jobs_progress_reaches_job_complete_in_the_panel(admin: Page, stack: Stack) -> None:
    token = stack.token("rep2", PASSWORD)
    job = {"object": "Contact", "operation": "insert", "contentType": "CSV"}
    loading = bulk_api(stack, token, "POST", "", json=job)["id"]
    stray = bulk_api(stack, token, "POST", "", json=job)["id"]
    open_section(admin, "Bulk jobs")
    panel = admin.get_by_role("region", name="Bulk API jobs")
    row = panel.get_by_role("row").filter(has_text=loading)
    expect(row).to_contain_text("Open")
    expect(row).to_contain_text("rep2")
    expect(panel.get_by_role("status")).to_contain_text("Refreshing")

    # the upload and its close come through the REST API; the panel follows on its own
    rows = "".join(f"Bulk{TAG},Row {TAG} {n:04d},Bulk {n}\n" for n in range(1, 2501))
    csv_text = "FirstName,LastName,Name\n" + rows
    headers = {"Content-Type": "text/csv"}
    bulk_api(stack, token, "PUT", f"/{loading}/batches", content=csv_text.encode(), headers=headers)
    bulk_api(stack, token, "PATCH", f"/{loading}", json={"state": "UploadComplete"})
    expect(row).to_contain_text("JobComplete", timeout=60_000)
    expect(row).to_contain_text("2500 / 2500 records")
    expect(row).to_contain_text("3 / 3")  # chunks of 1,000
    expect(row.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "100")
    expect(row.get_by_role("button", name=f"Abort {loading}")).to_have_count(0)
    assert f"Row {TAG}" not in admin.content()  # never a record value

    # the other job is still Open: the administrator aborts it, and its creator sees that
    panel.get_by_role("button", name=f"Abort {stray}").click()
    expect(admin.get_by_text(f"Job {stray} aborted")).to_be_visible()
    expect(panel.get_by_role("row").filter(has_text=stray)).to_contain_text("Aborted")
    assert bulk_api(stack, token, "GET", f"/{stray}")["state"] == "Aborted"
    expect(panel.get_by_role("status")).to_have_count(0)  # nothing runs: no more refreshing
    check_accessibility(admin, "admin bulk jobs")
    shot(admin, "admin/bulk-jobs")


def test_a_user_who_is_not_an_administrator_is_not_allowed(browser: Browser, stack: Stack) -> None:
    context = browser.new_context(viewport=WIDE, bypass_csp=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        sign_in(page, stack, "/admin", "viewer", PASSWORD)
        expect(page.get_by_text("You are not allowed to use the admin console")).to_be_visible()
        expect(page.locator(".user-name")).to_be_visible()  # who they are has been read
        expect(page.get_by_role("link", name="Admin", exact=True)).to_have_count(0)  # no link
        expect(page.get_by_role("navigation", name="Administration")).to_have_count(0)
        check_accessibility(page, "admin not allowed")
        shot(page, "admin/not-allowed")
    finally:
        context.close()


def test_screenshots_were_saved() -> None:
    names = {p.name for p in (SHOTS / "admin").glob("*.png")}
    assert {"integration-dlq.png", "users.png", "metadata.png", "not-allowed.png"} <= names
