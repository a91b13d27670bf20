#!/usr/bin/env python
"""End to end: a signed webhook sent -> the Runtime record changed, through `nexus up`.

    .venv/bin/python bench/end_to_end.py [--backend sqlite|mariadb] [--rate 500]
                                         [--seconds 20] [--env NEXUS_X=Y ...]
                                         [--integrations N]

A real stack (`nexus up` on free ports, every role its own process, log level warning; on
MariaDB a throwaway `mariadbd`), set up as a user does: a Contact object with a number field,
a permission set for the `integration` user, the route's secret, the route (upsert by external
id). Then bench/ingest.py's open-loop generator (another process; latency from the scheduled
send time, so a stall is not hidden) offers `--rate` signed webhooks/s through the gateway for
`--seconds`, each with its own external id and its scheduled send time (epoch ms) in the
payload, mapped into `Sent_Ms__c`.

When every record is there, the databases are read directly:
* latency per delivery = record's CreatedDate (database clock) - Sent_Ms__c. Record datetimes
  are whole seconds on MariaDB (DATETIME without fractional digits), so there the record
  change time is the Runtime inbox item's `finished_at` (database clock, ms), committed in
  the same transaction as the record (ADR 0016); both are reported where both are exact.
* stages, from the same rows: sent -> receipt stored (Integration's `received_at_ms`),
  receipt -> command accepted by Runtime (inbox `created_at`), accepted -> applied.
Checks sent == acked (2xx) == records. Prints one JSON document.

`--integrations N` (issue 24): N integration processes, `nexus up`'s own and N-1 more started
as an operator adds one (`nexus serve --role=integration`, loops on, same databases), and the
load split evenly between their own ports (`/hooks/...`), as a load balancer in front of them
would: N generator processes at rate/N each. `--integrations 1` is the same traffic to the one
process's port, the baseline of the comparison (no gateway hop in either).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ingest import SECRET, generate  # the open-loop generator, reused
from nexus.contracts.roles import ROLE_PORT_OFFSET, LogicalService, Role
from tests.e2e.test_stack import free_port_base

NEXUS = [sys.executable, "-m", "nexus"]
PASSWORD = "bench-admin-Pa55word!"
PACKAGE_OBJECTS = ROOT / "nexus" / "apps" / "sfcrm" / "package" / "components" / "objects.yaml"
SENT_MS = {
    "api_name": "Sent_Ms__c",
    "label": "Sent Ms",
    "type": "number",
    "precision": 18,
    "scale": 0,
}


def metadata() -> str:
    """sfcrm's Contact as `nexus up` installs it (metadata applies are additive: the object is
    applied whole) plus the send-time field, and a permission set for the integration user."""
    package = yaml.safe_load(PACKAGE_OBJECTS.read_text())["components"]
    contact = next(
        c["definition"] for c in package if c["kind"] == "object" and c["key"] == "Contact"
    )
    contact["fields"].append(SENT_MS)
    grant = {"object": "Contact", "create": True, "read": True, "edit": True, "all_fields": "edit"}
    permission_set = {"api_name": "Integration_Contacts", "label": "Integration: contacts"}
    return yaml.safe_dump(
        {"objects": [contact], "permission_sets": [permission_set | {"objects": [grant]}]}
    )


# connector/route/secret name as in bench/ingest.py's generator (it signs for that route)
ROUTES = """\
routes:
  - connector: bench
    route: signed
    signature: {scheme: standard_webhooks}
    secrets: [bench-signed]
    event_kind: {pointer: /type}
    source: {object_kind: {pointer: /object}, object_id: {pointer: /data/id}}
    command:
      op: upsert
      object: Contact
      external_id_field: External_Id__c
      fields: {External_Id__c: /data/id, LastName: /data/last_name, Sent_Ms__c: /data/sent_ms}
"""


def body_for(n: int, sent_ms: int) -> bytes:
    data = {"id": f"e2e-{n}", "last_name": f"Contact {n}", "sent_ms": sent_ms}
    return json.dumps({"type": "contact.created", "object": "contact", "data": data}).encode()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 1)

    return {"p50_ms": at(0.5), "p95_ms": at(0.95), "p99_ms": at(0.99), "max_ms": ordered[-1]}


def cpu_seconds(pids: list[int]) -> dict[str, float]:
    """User+system CPU seconds of each process so far (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        role = next((a.decode().split("=", 1)[1] for a in cmd if a.startswith(b"--role=")), "")
        name = role or Path(cmd[0].decode()).name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        path = Path(f"/proc/{p}/task/{p}/children")
        kids = [int(k) for k in path.read_text().split()] if path.exists() else []
        found += kids
        todo += kids
    return found


def nexus(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*NEXUS, *args], check=False, env=env, input=stdin, capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"nexus {args[0]} failed: {done.stderr[-2000:]}")
    return done.stdout


async def read_rows(urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per external id: sent ms, record created ms, receipt stored ms, inbox accepted/applied ms."""
    from sqlalchemy import select, text

    from nexus.integration.delivery.models import work
    from nexus.integration.ingress.models import ingress_receipt
    from nexus.platform.db.engine import create_engine
    from nexus.runtime.inbox.models import inbox

    rows: dict[str, dict[str, Any]] = {}
    runtime = create_engine(urls["runtime"], application_name="bench-e2e")
    try:
        async with runtime.connect() as conn:
            records = await conn.execute(
                text("SELECT external_id__c, sent_ms__c, created_date FROM rt_contact")
            )
            for ext, sent, stored in records:
                # SQLite: text() gives the stored string
                created = datetime.fromisoformat(stored) if isinstance(stored, str) else stored
                created_ms = created.replace(tzinfo=UTC).timestamp() * 1000
                rows[ext] = {"sent": int(sent), "record": created_ms}
            items = inbox.items
            for lane, created_at, finished_at, state in await conn.execute(
                select(items.c.lane_key, items.c.created_at, items.c.finished_at, items.c.state)
            ):
                ext = lane.rsplit(":", 1)[1]
                if ext in rows:
                    rows[ext] |= {"accepted": created_at, "applied": finished_at, "state": state}
    finally:
        await runtime.dispose()
    integration = create_engine(urls["integration"], application_name="bench-e2e")
    try:
        async with integration.connect() as conn:
            query = select(ingress_receipt.c.provider_delivery_id, ingress_receipt.c.received_at_ms)
            for delivery, received in await conn.execute(query):
                ext = "e2e-" + delivery.rsplit("-", 1)[1]
                if ext in rows:
                    # the warm-up's delivery ids share suffixes: the later receipt is ours
                    rows[ext]["received"] = max(received, rows[ext].get("received", 0))
            items = work.items  # the WorkItem: created when materialized, finished when sent
            query = select(items.c.lane_key, items.c.created_at, items.c.finished_at)
            for lane, created_at, finished_at in await conn.execute(query):
                ext = (lane or "").rsplit(":", 1)[-1]
                if ext in rows and created_at >= rows[ext].get("received", 0):
                    rows[ext] |= {"materialized": created_at, "delivered": finished_at}
    finally:
        await integration.dispose()
    return rows


def start_integrations(env: dict[str, str], base: int, count: int, work: Path) -> list[Any]:
    """`count` more integration processes (`nexus serve --role=integration`), each on its
    own port above the stack's, ready (`/readyz`) when this returns."""
    import httpx

    extra = []
    for n in range(count):
        port = base + 10 + n
        log = (work / f"integration-{n + 2}.log").open("w")
        extra.append(
            (
                port,
                subprocess.Popen(
                    [*NEXUS, "serve", "--role=integration", f"--port={port}", "--loops=all"],
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                ),
            )
        )
    deadline = time.monotonic() + 60
    for port, process in extra:
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"integration on :{port} did not start; see {work}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    return extra


def send(urls: list[str], rate: int, seconds: int) -> dict[str, Any]:
    """The load split evenly over `urls`, one generator process each; their reports summed
    (ack latency percentiles: the worst generator's)."""
    tags = [f"p{n}" for n in range(len(urls))] if len(urls) > 1 else [""]
    generators = [
        subprocess.Popen(
            [sys.executable, __file__, "--generate", url, str(rate / len(urls)), str(seconds)]
            + ([tag] if tag else []),
            stdout=subprocess.PIPE,
            text=True,
        )
        for url, tag in zip(urls, tags, strict=True)
    ]
    reports = [json.loads(g.communicate()[0]) for g in generators]
    if any(g.returncode for g in generators):
        raise RuntimeError("a generator failed")
    statuses: dict[str, int] = {}
    for report in reports:
        for code, n in report["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
    return {
        "sent": sum(r["sent"] for r in reports),
        "ok": sum(r["ok"] for r in reports),
        "statuses": statuses,
        "generator_cpu_s": round(sum(r["generator_cpu_s"] for r in reports), 2),
        **{k: max(r[k] for r in reports) for k in ("p50_ms", "p99_ms", "max_ms")},
    }


def wait_for_records(urls: dict[str, str], expected: int, timeout: float) -> float:
    """Seconds until `expected` records exist (or the timeout)."""
    from sqlalchemy import text

    from nexus.platform.db.engine import create_engine, reading

    async def count() -> int:
        engine = create_engine(urls["runtime"], application_name="bench-e2e")
        try:  # a read transaction: a write one (BEGIN IMMEDIATE) queues behind the stack's
            async with reading(engine) as conn:
                return int((await conn.execute(text("SELECT count(*) FROM rt_contact"))).scalar())
        finally:
            await engine.dispose()

    started = time.monotonic()
    while time.monotonic() - started < timeout and asyncio.run(count()) < expected:
        time.sleep(0.5)
    return time.monotonic() - started


def run(urls: dict[str, str], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    base = free_port_base()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(work / "var"),
        NEXUS_PORT_BASE=str(base),
        NEXUS_LOG_LEVEL="warning",
        NEXUS_LOG_FORMAT="json",
        NEXUS_BOOTSTRAP_ADMIN_PASSWORD=PASSWORD,
        **{f"NEXUS_{name.upper()}_DATABASE_URL": url for name, url in urls.items()},
    )
    env.update(dict(kv.split("=", 1) for kv in args.env))
    log = (work / "up.log").open("w")
    extra: list[Any] = []
    up = subprocess.Popen(
        [*NEXUS, "up"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        while up.stdout is not None:
            line = up.stdout.readline()
            if not line:
                raise RuntimeError(f"nexus up did not become ready; see {work}/up.log")
            if "is ready at" in line:
                break
        (work / "metadata.yaml").write_text(metadata())
        (work / "routes.yaml").write_text(ROUTES)
        nexus(env, "metadata", "apply", str(work / "metadata.yaml"))
        assign = ["--username", "integration", "--permission-set", "Integration_Contacts"]
        nexus(env, "admin", "assign-permission-set", *assign)
        nexus(env, "hooks", "set-secret", "bench-signed", stdin=SECRET + "\n")
        nexus(env, "integration", "apply-routes", str(work / "routes.yaml"))
        url = f"http://127.0.0.1:{base}/webhooks/bench/signed"  # the gateway's path
        targets = [url]
        if args.integrations:
            extra = start_integrations(env, base, args.integrations - 1, work)
            ports = [base + ROLE_PORT_OFFSET[Role.INTEGRATION]] + [port for port, _ in extra]
            targets = [f"http://127.0.0.1:{port}/hooks/bench/signed" for port in ports]
        pids = descendants(up.pid) + [process.pid for _, process in extra]
        warm = subprocess.run(  # imports, pools, route cache, schema cache: not measured
            [sys.executable, __file__, "--generate", url, "50", "1", "warm"],
            check=True,
            capture_output=True,
            text=True,
        )
        if json.loads(warm.stdout)["ok"] != 50:
            raise RuntimeError(f"warm-up not accepted: {warm.stdout}")
        wait_for_records(urls, 50, 60)
        cpu_before, load_before = cpu_seconds(pids), os.getloadavg()
        started = time.monotonic()
        sent = send(targets, args.rate, args.seconds)
        drained_after = wait_for_records(urls, 50 + sent["ok"], 120)
        wall = time.monotonic() - started
        cpu_after, load_after = cpu_seconds(pids), os.getloadavg()
    finally:
        for _, process in extra:
            process.terminate()
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
        up.terminate()
        try:
            up.wait(timeout=40)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()
    rows = {k: v for k, v in asyncio.run(read_rows(urls)).items() if not k.startswith("e2e-w")}
    records = list(rows.values())
    exact_record_clock = args.backend == "sqlite"
    applied = [r["applied"] - r["sent"] for r in records if r.get("applied")]
    # (with --integrations the receipts are not matched to their records: their delivery
    # ids do not say which generator's tag they carry, so the receipt stages stay empty)
    both = {"materialized", "received"}
    result: dict[str, Any] = {
        "sent": sent["sent"],
        "acked_2xx": sent["ok"],
        "records": len(records),
        "all_equal": sent["sent"] == sent["ok"] == len(records),
        "statuses": sent["statuses"],
        "latency_sent_to_record": percentiles(
            [r["record"] - r["sent"] for r in records] if exact_record_clock else applied
        ),
        "latency_source": "record CreatedDate"
        if exact_record_clock
        else "inbox finished_at (record datetimes are whole seconds on MariaDB)",
        "latency_sent_to_inbox_applied": percentiles(applied),
        "stages": {
            "sent_to_receipt_stored": percentiles(
                [r["received"] - r["sent"] for r in records if "received" in r]
            ),
            "receipt_to_materialized": percentiles(
                [r["materialized"] - r["received"] for r in records if r.keys() >= both]
            ),
            "materialized_to_runtime_accepted": percentiles(
                [r["accepted"] - r["materialized"] for r in records if "materialized" in r]
            ),
            "runtime_accepted_to_work_finished": percentiles(
                [r["delivered"] - r["accepted"] for r in records if r.get("delivered")]
            ),
            "receipt_to_runtime_accepted": percentiles(
                [r["accepted"] - r["received"] for r in records if "received" in r]
            ),
            "accepted_to_applied": percentiles(
                [r["applied"] - r["accepted"] for r in records if r.get("applied")]
            ),
        },
        "ack_latency": {k: sent[k] for k in ("p50_ms", "p99_ms", "max_ms")},
        "offered_per_s": args.rate,
        "seconds": args.seconds,
        "records_per_s": round(len(records) / (args.seconds + max(0.0, drained_after)), 1),
        "drain_after_send_s": round(drained_after, 1),
        "integration_processes": max(1, args.integrations),
        "cpu_s_by_process": {
            k: round(cpu_after.get(k, 0) - v, 1) for k, v in sorted(cpu_before.items())
        },
        "generator_cpu_s": sent["generator_cpu_s"],
        "cpu_s_wall": round(wall, 1),
        "load_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
    }
    if exact_record_clock:
        # cross-check: the record's CreatedDate vs the inbox completion in the same commit
        result["record_vs_inbox_finished_ms"] = percentiles(
            [r["applied"] - r["record"] for r in records if r.get("applied")]
        )
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        url, rate, seconds = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
        tag = sys.argv[5] if len(sys.argv) > 5 else ""

        def body(n: int, sent_ms: int) -> bytes:
            return body_for(n, sent_ms).replace(b"e2e-", f"e2e-{tag}".encode(), 1)

        import uvloop  # as bench/ingest.py's generator: the cheaper loop for the load side

        print(json.dumps(uvloop.run(generate(url, rate, seconds, body if tag else body_for))))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--env", action="append", default=[], help="NEXUS_X=Y for the stack")
    parser.add_argument(
        "--integrations",
        type=int,
        default=0,
        help="N integration processes, the load split between their ports (0: via the gateway)",
    )
    args = parser.parse_args()
    uptime = subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()
    out: dict[str, Any] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "backend": args.backend,
        "uptime_before": uptime,
        "settings": args.env,
    }
    work = Path(tempfile.mkdtemp(prefix="nexus-bench-e2e-"))
    services = [s.value for s in LogicalService]
    if args.backend == "sqlite":
        urls = {s: f"sqlite+aiosqlite:///{work}/{s}.sqlite3" for s in services}
        out["results"] = run(urls, args, work)
    else:
        from tests.support.mariadb import find_server_binary, start_mariadb

        binary = find_server_binary()
        if binary is None:
            raise SystemExit("mariadbd not found")
        server = start_mariadb(binary)
        try:
            urls = {s: server.create_database(f"bench_e2e_{s}") for s in services}
            out["results"] = run(urls, args, work)
        finally:
            server.stop()
    out["uptime_after"] = subprocess.run(
        ["uptime"], check=False, capture_output=True, text=True
    ).stdout
    out["uptime_after"] = out["uptime_after"].strip()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
