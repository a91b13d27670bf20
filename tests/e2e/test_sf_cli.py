"""The Salesforce CLI (`sf` 2.x, from npm: tests/e2e/sfcli) against `nexus up` over HTTPS.

Each test runs one of the six commands issue 26 names the way a user does (`sf org login
access-token`, `sf data query`, `sf sobject describe`, `sf data export tree`, `sf data import
tree`, `sf data upsert bulk`) and checks what the user sees: the output, the files written, the
records as another client (simple-salesforce) reads them back.

The CLI runs hermetically (`SfCli`): its own HOME/XDG/TMPDIR, no environment inherited but PATH,
every update/telemetry/version check switched off, the stack's CA trusted through
NODE_EXTRA_CA_CERTS, and `sfcli/netguard.cjs` preloaded into every Node process: it refuses any
connection or DNS lookup that is not loopback and records it, records child processes, and
records each HTTP exchange (method, URL, status, body heads; no Authorization header). A command
fails its test when it tried to leave the machine or start a child; a failing command's
exchanges are printed with the failure, so a missing server piece shows as the exact request
the CLI sent and the answer it got."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from simple_salesforce import Salesforce

from tests.conftest import Backend
from tests.e2e.sfcrm_stack import PASSWORD, VERSION, Stack, sfcrm_stack

pytestmark = pytest.mark.e2e

SFCLI_DIR = Path(__file__).parent / "sfcli"
SF_BIN = SFCLI_DIR / "node_modules" / ".bin" / "sf"
NETGUARD = SFCLI_DIR / "netguard.cjs"
COMMAND_TIMEOUT = 180  # seconds; `sf data upsert bulk --wait 2` polls for up to 2 minutes
ALIAS = "nexus"
# Salesforce usernames look like email addresses, and the CLI relies on it: `sf org list`
# only lists auth files named like one (core's OrgAccessor), so a user called `rep1` would be
# usable by alias but never listed
CLI_USER = "sfcli.user@example.com"


# ------------------------------------------------------------------ running the CLI


@dataclass
class Run:
    """One finished `sf` invocation and what netguard recorded about it."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # connections/lookups off the machine
    spawned: list[str] = field(default_factory=list)  # child processes

    def result(self) -> Any:
        """The `result` of a `--json` run (its whole JSON answer is on stdout): an object or a
        list for each command used here (a string means the CLI took a non-JSON answer)."""
        answer = json.loads(self.stdout)
        assert answer.get("status") == 0, self.explain()
        assert isinstance(answer.get("result"), dict | list), self.explain()
        return answer["result"]

    def requests(self) -> list[str]:
        return [f"{x['method']} {x['url']} -> {x.get('status')}" for x in self.exchanges]

    def explain(self) -> str:
        lines = [
            f"$ sf {' '.join(self.args)}  (exit {self.returncode}, {self.seconds:.1f}s)",
            f"--- stdout (tail)\n{self.stdout[-3000:]}",
            f"--- stderr (tail)\n{self.stderr[-2000:]}",
            "--- what the CLI sent and what it got back:",
        ]
        for x in self.exchanges:
            lines.append(f"> {x['method']} {x['url']} -> {x.get('status')} {x.get('error', '')}")
            if x.get("requestBody"):
                lines.append(f"    sent: {_squeeze(x['requestBody'])}")
            kind = x.get("responseHeaders", {}).get("content-type", "")
            lines.append(f"    got:  ({kind}) {_squeeze(x.get('responseBody', ''))}")
        lines += [f"refused: {r}" for r in self.refused]
        lines += [f"spawned: {s}" for s in self.spawned]
        return "\n".join(lines)


def _squeeze(body: str, limit: int = 600) -> str:
    flat = " ".join(body.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}..."


class SfCli:
    """`sf` with a private HOME and a hermetic environment (nothing inherited but PATH)."""

    def __init__(self, root: Path, stack: Stack) -> None:
        self.root = root
        self.stack = stack
        self.home = root / "home"
        self.work = root / "work"
        self.traces = root / "traces"
        for folder in (self.home, self.work, self.traces, root / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.tokens: list[str] = []  # every access token handed to the CLI

    def env(self, trace: Path, **extra: str) -> dict[str, str]:
        home = self.home
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "TMPDIR": str(self.root / "tmp"),  # the telemetry spool would go to os.tmpdir()
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "FORCE_COLOR": "0",
            # no usage data, no update, no "new version available" (each spawns a child that
            # calls out: dc.services.visualstudio.com, developer.salesforce.com, npmjs.org)
            "SF_DISABLE_TELEMETRY": "true",
            "SF_AUTOUPDATE_DISABLE": "true",
            # the variable oclif's plugin-update reads: with only SF_AUTOUPDATE_DISABLE=true
            # set, an npm-installed sf 2.150 spawns `sf update --autoupdate` on first run
            "SF_DISABLE_AUTOUPDATE": "true",
            "SF_SKIP_NEW_VERSION_CHECK": "true",
            "SF_HIDE_RELEASE_NOTES": "true",
            "SF_DISABLE_DNS_CHECK": "true",
            "SF_USE_GENERIC_UNIX_KEYCHAIN": "true",  # the auth files' key in $HOME/.sfdx
            "SF_DISABLE_LOG_FILE": "true",  # no ~/.sf/sf-*.log
            "SF_USE_PROGRESS_BAR": "false",
            "NODE_EXTRA_CA_CERTS": str(self.stack.ca),
            "NODE_OPTIONS": f"--require {NETGUARD}",
            "NEXUS_SF_TRACE": str(trace),
            **extra,
        }

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        access_token: str | None = None,
        timeout: float = COMMAND_TIMEOUT,
    ) -> Run:
        self.count += 1
        trace = self.traces / f"{self.count:03d}-{'-'.join(args[:3])}.jsonl"
        extra = {"SF_ACCESS_TOKEN": access_token} if access_token is not None else {}
        if access_token:
            self.tokens.append(access_token)
        started = time.monotonic()
        done = subprocess.run(
            [str(SF_BIN), *args],
            cwd=cwd or self.work,
            env=self.env(trace, **extra),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        run = Run(args, done.returncode, done.stdout, done.stderr, time.monotonic() - started)
        if trace.exists():
            for line in trace.read_text().splitlines():
                entry = json.loads(line)
                if "blocked" in entry:
                    run.refused.append(entry["blocked"])
                elif "spawn" in entry:
                    run.spawned.append(entry["spawn"])
                else:
                    run.exchanges.append(entry)
        # hermetic: the stack is the only thing the CLI talked to, and it started nothing
        assert not run.refused, run.explain()
        assert not run.spawned, run.explain()
        strays = [x["url"] for x in run.exchanges if not x["url"].startswith(self.stack.https)]
        assert not strays, run.explain()
        return run

    def ok(self, *args: str, **kwargs: Any) -> Run:
        run = self.run(*args, **kwargs)
        assert run.returncode == 0, run.explain()
        return run


def login(sf: SfCli, token: str, alias: str) -> Run:
    """What a CI job does: the token in SF_ACCESS_TOKEN, the instance URL as the user knows it."""
    return sf.run(
        "org",
        "login",
        "access-token",
        "--instance-url",
        sf.stack.https,
        "--alias",
        alias,
        "--no-prompt",
        access_token=token,
    )


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Stack]:
    with sfcrm_stack(tmp_path_factory.mktemp("sfcli-stack"), backend) as running:
        yield running


@pytest.fixture(scope="module")
def sf(tmp_path_factory: pytest.TempPathFactory, stack: Stack) -> SfCli:
    node = shutil.which("node")
    assert node is not None, "Node.js is required"
    if not SF_BIN.exists():  # `make node-deps` installs it; a bare pytest run does it here
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=SFCLI_DIR,
            check=True,
            timeout=600,
            capture_output=True,
        )
    return SfCli(tmp_path_factory.mktemp("sfcli"), stack)


@pytest.fixture(scope="module")
def cli_user(stack: Stack) -> str:
    """A sales user with an email-shaped username, as Salesforce usernames are."""
    stack.nexus(
        "admin", "create-user", "--username", CLI_USER, "--password-stdin", stdin=PASSWORD + "\n"
    )
    stack.nexus(
        "admin",
        "assign-permission-set",
        "--username",
        CLI_USER,
        "--permission-set",
        "Sfcrm_Test_Sales",
    )
    return CLI_USER


@pytest.fixture(scope="module")
def org(sf: SfCli, stack: Stack, cli_user: str) -> str:
    """The alias the CLI user is logged in under (a fresh token: tokens live 15 minutes)."""
    run = login(sf, stack.token(cli_user, PASSWORD), ALIAS)
    assert run.returncode == 0, run.explain()
    return ALIAS


def salesforce(stack: Stack, user: str = CLI_USER) -> Salesforce:
    """simple-salesforce as the second client that arranges and reads back records."""
    session = requests.Session()
    session.verify = str(stack.ca)
    session.trust_env = False
    return Salesforce(
        instance_url=stack.https,
        session_id=stack.token(user, PASSWORD),
        version=VERSION,
        session=session,
    )


# ------------------------------------------------------------------ the six commands


def test_org_login_access_token(sf: SfCli, stack: Stack, cli_user: str) -> None:
    token = stack.token(cli_user, PASSWORD)
    org_id = token.split("!", 1)[0]
    assert org_id.startswith("00D"), "the CLI only accepts `<org id>!<token>` session ids"

    run = login(sf, token, "nexus-login")
    assert run.returncode == 0, run.explain()
    assert f"Successfully authorized {cli_user} with org ID {org_id}" in run.stdout, run.explain()

    shown = sf.ok("org", "display", "--target-org", "nexus-login", "--json")
    org = shown.result()
    assert org["username"] == cli_user
    assert org["id"] == org_id
    assert org["alias"] == "nexus-login"
    assert org["instanceUrl"].rstrip("/") == stack.https
    assert org["connectedStatus"] == "Connected", shown.explain()
    assert token not in shown.stdout  # the CLI redacts it; our side must not echo it either

    listed = sf.ok("org", "list", "--json").result()
    usernames = [o["username"] for group in listed.values() for o in group]
    assert cli_user in usernames, listed

    # a token in the right shape that the stack does not know: refused, nothing stored
    forged = f"{org_id}!{'A' * 40}"
    refused = login(sf, forged, "nexus-forged")
    assert refused.returncode != 0, refused.explain()
    assert "Session expired or invalid" in refused.stderr, refused.explain()
    known = sf.ok("alias", "list", "--json").result()
    assert "nexus-forged" not in [a["alias"] for a in known]


def test_data_query(sf: SfCli, stack: Stack, org: str) -> None:
    api = salesforce(stack)
    for name, industry in (("SfCli Query Beta", "Energy"), ("SfCli Query Alpha", "Banking")):
        assert api.Account.create({"Name": name, "Industry": industry})["success"]
    soql = "SELECT Id, Name, Industry FROM Account WHERE Name LIKE 'SfCli Query%' ORDER BY Name"

    table = sf.ok("data", "query", "--query", soql, "--target-org", org)
    assert "Total number of records retrieved: 2." in table.stdout, table.explain()
    rows = [line for line in table.stdout.splitlines() if "SfCli Query" in line]
    assert len(rows) == 2, table.explain()
    cells = [[c.strip() for c in row.strip().strip("│").split("│")] for row in rows]
    assert [c[1:] for c in cells] == [
        ["SfCli Query Alpha", "Banking"],
        ["SfCli Query Beta", "Energy"],
    ], table.explain()

    answer = sf.ok("data", "query", "--query", soql, "--target-org", org, "--json").result()
    assert answer["totalSize"] == 2
    assert answer["done"] is True
    assert [(r["Name"], r["Industry"]) for r in answer["records"]] == [
        ("SfCli Query Alpha", "Banking"),
        ("SfCli Query Beta", "Energy"),
    ]
    assert all(r["Id"].startswith("001") and len(r["Id"]) == 18 for r in answer["records"])

    csv = sf.ok(
        "data", "query", "--query", soql, "--target-org", org, "--result-format", "csv"
    ).stdout.splitlines()
    assert csv[0] == "Id,Name,Industry"
    assert [line.split(",", 1)[1] for line in csv[1:3]] == [
        "SfCli Query Alpha,Banking",
        "SfCli Query Beta,Energy",
    ]

    bad = sf.run("data", "query", "--query", "SELECT Nope__c FROM Account", "--target-org", org)
    assert bad.returncode != 0
    assert "Nope__c" in bad.stderr, bad.explain()  # the server's message, not a stack trace

    # sharing holds through the CLI: another rep's private Opportunity is not in the answer
    salesforce(stack, "rep1").Opportunity.create(
        {"Name": "SfCli Rep1 Secret", "StageName": "Prospecting", "CloseDate": "2027-01-31"}
    )
    hidden = sf.ok(
        "data",
        "query",
        "--query",
        "SELECT Id FROM Opportunity WHERE Name = 'SfCli Rep1 Secret'",
        "--target-org",
        org,
        "--json",
    ).result()
    assert hidden["totalSize"] == 0


def test_sobject_describe(sf: SfCli, org: str) -> None:
    run = sf.ok("sobject", "describe", "--sobject", "Account", "--target-org", org, "--json")
    described = run.result()
    assert described["name"] == "Account", run.explain()
    assert described["keyPrefix"] == "001"
    fields = {f["name"]: f for f in described["fields"]}
    assert fields["Id"]["type"] == "id"
    assert fields["Name"]["nameField"] is True
    assert fields["External_Customer_Id__c"]["externalId"] is True
    assert "Banking" in [p["value"] for p in fields["Industry"]["picklistValues"]]
    children = {(c["childSObject"], c["relationshipName"]) for c in described["childRelationships"]}
    assert ("Contact", "Contacts") in children

    human = sf.ok("sobject", "describe", "--sobject", "Contact", "--target-org", org)
    contact = json.loads(human.stdout)  # the CLI prints the describe itself
    account_id = next(f for f in contact["fields"] if f["name"] == "AccountId")
    assert account_id["referenceTo"] == ["Account"]

    missing = sf.run("sobject", "describe", "--sobject", "NoSuchThing__c", "--target-org", org)
    assert missing.returncode != 0
    assert "NoSuchThing__c" in missing.stderr, missing.explain()


def test_data_export_tree(sf: SfCli, stack: Stack, org: str) -> None:
    api = salesforce(stack)
    account = api.Account.create({"Name": "SfCli Export Co", "Industry": "Banking"})["id"]
    for first, last in (("Ann", "Exported"), ("Bob", "Exportee")):
        api.Contact.create({"FirstName": first, "LastName": last, "AccountId": account})
    soql = (
        "SELECT Id, Name, Industry, (SELECT Id, FirstName, LastName FROM Contacts "
        "ORDER BY LastName) FROM Account WHERE Name = 'SfCli Export Co'"
    )
    out = sf.work / "export"
    run = sf.ok(
        "data",
        "export",
        "tree",
        "--query",
        soql,
        "--output-dir",
        str(out),
        "--plan",
        "--target-org",
        org,
    )
    assert f"wrote 1 records to {out / 'Account.json'}" in run.stdout, run.explain()
    assert f"wrote 2 records to {out / 'Contact.json'}" in run.stdout, run.explain()

    assert sorted(p.name for p in out.iterdir()) == [
        "Account-Contact-plan.json",
        "Account.json",
        "Contact.json",
    ]
    plan = json.loads((out / "Account-Contact-plan.json").read_text())
    assert [(step["sobject"], step["files"]) for step in plan] == [
        ("Account", ["Account.json"]),
        ("Contact", ["Contact.json"]),
    ]
    accounts = json.loads((out / "Account.json").read_text())["records"]
    assert accounts == [
        {
            "attributes": {"type": "Account", "referenceId": "AccountRef1"},
            "Name": "SfCli Export Co",
            "Industry": "Banking",
        }
    ]
    contacts = json.loads((out / "Contact.json").read_text())["records"]
    assert [(c["FirstName"], c["LastName"], c["AccountId"]) for c in contacts] == [
        ("Ann", "Exported", "@AccountRef1"),  # the parent as a reference, not an Id
        ("Bob", "Exportee", "@AccountRef1"),
    ]
    assert all("Id" not in c for c in contacts)


def test_data_import_tree(sf: SfCli, stack: Stack, org: str) -> None:
    nested = {
        "records": [
            {
                "attributes": {"type": "Account", "referenceId": "ImportAcme"},
                "Name": "SfCli Import Acme",
                "Industry": "Banking",
                "Contacts": {
                    "records": [
                        {
                            "attributes": {"type": "Contact", "referenceId": "ImportAnn"},
                            "FirstName": "Ann",
                            "LastName": "Imported",
                        }
                    ]
                },
            },
            {
                "attributes": {"type": "Account", "referenceId": "ImportBeta"},
                "Name": "SfCli Import Beta",
            },
        ]
    }
    (sf.work / "import-nested.json").write_text(json.dumps(nested))
    run = sf.ok("data", "import", "tree", "--files", "import-nested.json", "--target-org", org)
    for reference in ("ImportAcme", "ImportBeta", "ImportAnn"):
        assert reference in run.stdout, run.explain()

    # a plan: parents first, children point at them by reference across files
    plan_dir = sf.work / "import-plan"
    plan_dir.mkdir()
    (plan_dir / "Account.json").write_text(
        json.dumps(
            {
                "records": [
                    {
                        "attributes": {"type": "Account", "referenceId": "PlanCo"},
                        "Name": "SfCli Plan Co",
                    }
                ]
            }
        )
    )
    (plan_dir / "Contact.json").write_text(
        json.dumps(
            {
                "records": [
                    {
                        "attributes": {"type": "Contact", "referenceId": "PlanBob"},
                        "LastName": "Planned",
                        "AccountId": "@PlanCo",
                    }
                ]
            }
        )
    )
    (plan_dir / "plan.json").write_text(
        json.dumps(
            [
                {"sobject": "Account", "saveRefs": True, "files": ["Account.json"]},
                {"sobject": "Contact", "resolveRefs": True, "files": ["Contact.json"]},
            ]
        )
    )
    planned = sf.ok(
        "data",
        "import",
        "tree",
        "--plan",
        str(plan_dir / "plan.json"),
        "--target-org",
        org,
        "--json",
    ).result()
    ids = {r["refId"]: r["id"] for r in planned}
    assert ids["PlanCo"].startswith("001")
    assert ids["PlanBob"].startswith("003")

    api = salesforce(stack)
    found = api.query(
        "SELECT Name, Industry, (SELECT FirstName, LastName FROM Contacts) FROM Account "
        "WHERE Name LIKE 'SfCli Import%' ORDER BY Name"
    )["records"]
    assert [(a["Name"], a["Industry"]) for a in found] == [
        ("SfCli Import Acme", "Banking"),
        ("SfCli Import Beta", None),
    ]
    assert [(c["FirstName"], c["LastName"]) for c in found[0]["Contacts"]["records"]] == [
        ("Ann", "Imported")
    ]
    assert found[1]["Contacts"] is None
    bob = api.query("SELECT AccountId, Account.Name FROM Contact WHERE LastName = 'Planned'")
    assert [r["AccountId"] for r in bob["records"]] == [ids["PlanCo"]]
    assert bob["records"][0]["Account"]["Name"] == "SfCli Plan Co"


def test_data_upsert_bulk(sf: SfCli, stack: Stack, org: str) -> None:
    api = salesforce(stack)
    existing = api.Account.create({"Name": "SfCli Bulk Old", "External_Customer_Id__c": "SFB-1"})
    (sf.work / "upsert.csv").write_text(
        "Name,External_Customer_Id__c,Industry\n"
        "SfCli Bulk One,SFB-1,Banking\n"
        "SfCli Bulk Two,SFB-2,Energy\n"
        '"SfCli Bulk, Three",SFB-3,\n'
    )
    run = sf.ok(
        "data",
        "upsert",
        "bulk",
        "--sobject",
        "Account",
        "--file",
        "upsert.csv",
        "--external-id",
        "External_Customer_Id__c",
        "--wait",
        "2",
        "--target-org",
        org,
        "--json",
    )
    outcome = run.result()
    job = outcome["jobInfo"]
    assert job["id"].startswith("750"), run.explain()  # a Bulk API job id
    assert len(job["id"]) == 18
    assert (job["state"], job["numberRecordsProcessed"], job["numberRecordsFailed"]) == (
        "JobComplete",
        3,
        0,
    ), run.explain()
    done = outcome["records"]
    assert [
        (r["External_Customer_Id__c"], r["sf__Created"]) for r in done["successfulResults"]
    ] == [
        ("SFB-1", "false"),  # matched by the external id: updated
        ("SFB-2", "true"),
        ("SFB-3", "true"),
    ], run.explain()
    assert done["successfulResults"][0]["sf__Id"] == existing["id"]
    assert done["failedResults"] == []
    assert done["unprocessedRecords"] == []

    found = api.query(
        "SELECT Id, Name, Industry, External_Customer_Id__c FROM Account "
        "WHERE External_Customer_Id__c LIKE 'SFB-%' ORDER BY External_Customer_Id__c"
    )["records"]
    assert [(r["External_Customer_Id__c"], r["Name"], r["Industry"]) for r in found] == [
        ("SFB-1", "SfCli Bulk One", "Banking"),  # updated in place
        ("SFB-2", "SfCli Bulk Two", "Energy"),
        ("SFB-3", "SfCli Bulk, Three", None),
    ]
    assert found[0]["Id"] == existing["id"]

    # a row the server refuses (the validation rule): the CLI reports the failure
    (sf.work / "upsert-bad.csv").write_text(
        "Name,External_Customer_Id__c,AnnualRevenue\nSfCli Bulk Neg,SFB-9,-5\n"
    )
    refused = sf.run(
        "data",
        "upsert",
        "bulk",
        "--sobject",
        "Account",
        "--file",
        "upsert-bad.csv",
        "--external-id",
        "External_Customer_Id__c",
        "--wait",
        "2",
        "--target-org",
        org,
    )
    assert refused.returncode != 0, refused.explain()
    assert "failed to process 1 records" in refused.stderr, refused.explain()
    assert (
        api.query("SELECT Id FROM Account WHERE External_Customer_Id__c = 'SFB-9'")["totalSize"]
        == 0
    )


# ------------------------------------------------------------------ last: what the logs kept


def test_the_roles_logs_hold_no_token_or_value_the_cli_sent(sf: SfCli, stack: Stack) -> None:
    """Runs after the six commands: their SOQL literals, record names and tokens went through
    every role, and none of them may be in a role's log."""
    time.sleep(1)  # the supervisor pumps each role's output into its log line by line
    logs = Path(stack.env["NEXUS_VAR_DIR"]) / "logs"
    logged = "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log")))
    assert "http.request" in logged  # the access log is there: the scan reads real lines
    assert sf.tokens, "the CLI was never given a token"
    sent = {
        **{f"token {i}": token for i, token in enumerate(sf.tokens)},
        "a token's secret part": sf.tokens[0].split("!", 1)[-1],
        "SOQL literal": "SfCli Query%",
        "record name": "SfCli Import Acme",
        "bulk CSV value": "SfCli Bulk, Three",
        "external id": "SFB-2",
    }
    leaked = [what for what, value in sent.items() if value in logged]
    assert not leaked, f"the roles' logs hold: {leaked}"
