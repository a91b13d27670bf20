#!/usr/bin/env python
"""The Salesforce REST dialect through the gateway over HTTPS, against Runtime called directly.

    .venv/bin/python bench/sfcrm_rest.py [--concurrency 50] [--seconds 20] [--rows 2000]

A real stack (`nexus up` on free ports, SQLite, set up as tests/e2e/sfcrm_stack.py does),
`--rows` Contacts made through sObject collections. Then, each for `--seconds` with
`--concurrency` closed-loop clients (one HTTP/1.1 keep-alive connection each):
* `GET /services/data/v59.0/sobjects/Contact/{id}` through the gateway over HTTPS, and the
  same read as Runtime's `POST /internal/v1/runtime/records/read` called directly (workload
  token + delegation, as the AppService calls it);
* a 200-row SOQL page (`SELECT Id, LastName, Email FROM Contact LIMIT 200`), both ways.
Reports requests/s and p50/p99 per case, and the dialect/direct p50 ratio (the cost of the
gateway + AppService hops; goal <= 1.4). On Linux also the CPU each stack process (and this
benchmark's clients) used per request in each case, read from /proc: unlike latency it hardly
depends on what else the machine runs, and under saturation the p50 ratio follows the ratio of
CPU per request. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nexus.contracts.roles import ROLE_PORT_OFFSET, Role
from nexus.platform.workload import WorkloadSigner, workload_key_dir
from tests.conftest import Backend
from tests.e2e.sfcrm_stack import VERSION, Stack, sfcrm_stack

SOQL = "SELECT Id, LastName, Email FROM Contact LIMIT 200"
#: The stack processes whose CPU is reported per request (plus this process: the clients).
CPU_ROLES = ("gateway", "app", "runtime-api")


def role_pids(var_dir: str) -> dict[str, int]:
    """The stack's role processes (`nexus serve --role=R`) by role, found by their var dir."""
    found: dict[str, int] = {}
    marker = f"NEXUS_VAR_DIR={var_dir}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        roles = [a[len(b"--role=") :].decode() for a in argv if a.startswith(b"--role=")]
        if marker in environ and b"serve" in argv and roles and roles[0] in CPU_ROLES:
            found[roles[0]] = int(entry.name)
    return found


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds so far of each process (and of this one, as `clients`)."""
    out: dict[str, float] = {}
    for name, pid in {**pids, "clients": os.getpid()}.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def make_contacts(stack: Stack, rows: int) -> list[str]:
    ids: list[str] = []
    auth = {"Authorization": f"Bearer {stack.tokens['rep1']}"}
    with httpx.Client(base_url=stack.https, verify=stack.tls(), timeout=60) as http:
        for start in range(0, rows, 200):
            records = [
                {
                    "attributes": {"type": "Contact"},
                    "LastName": f"Bench{i}",
                    "Name": f"B {i}",
                    "Email": f"b{i}@example.com",
                }
                for i in range(start, min(start + 200, rows))
            ]
            reply = http.post(
                f"/services/data/v{VERSION}/composite/sobjects",
                json={"allOrNone": True, "records": records},
                headers=auth,
            )
            reply.raise_for_status()
            ids += [r["id"] for r in reply.json()]
    return ids


async def closed_loop(
    make_client: Any,
    request: Any,
    *,
    concurrency: int,
    seconds: float,
    pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    latencies: list[float] = []
    failures = 0
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal failures
        async with make_client() as client:
            await request(client)  # warm the connection
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                status = await request(client)
                latencies.append(time.perf_counter() - started)
                failures += status != 200

    began = time.monotonic()
    cpu_before = cpu_seconds(pids or {})
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - began
    cpu_after = cpu_seconds(pids or {})
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    n = max(1, len(latencies))
    return {
        "requests": len(latencies),
        "failures": failures,
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(cuts[49] * 1000, 2),
        "p99_ms": round(cuts[98] * 1000, 2),
        # includes the clients' start (50 connections) and warm-up requests
        "cpu_ms_per_request": {
            name: round((cpu_after[name] - cpu_before[name]) * 1000 / n, 2)
            for name in cpu_after
            if name in cpu_before
        },
    }


async def measure(stack: Stack, ids: list[str], concurrency: int, seconds: float) -> dict[str, Any]:
    token = stack.tokens["rep1"]
    tls = stack.tls()
    runtime = f"http://127.0.0.1:{stack.base + ROLE_PORT_OFFSET[Role.RUNTIME_API]}"
    signer = WorkloadSigner.load(
        workload_key_dir(Path(stack.env["NEXUS_VAR_DIR"]) / "secrets"), "app-sfcrm"
    )

    def direct_headers() -> dict[str, str]:
        return signer.headers("runtime-api", deadline_ms=int((time.time() + 30) * 1000))

    async with httpx.AsyncClient(base_url=runtime) as http:
        exchanged = await http.post(
            "/internal/v1/identity/exchange", json={"credential": token}, headers=direct_headers()
        )
        exchanged.raise_for_status()
    delegation = exchanged.json()["delegation"]
    deadline = int((time.time() + seconds + 120) * 1000)

    def dialect_client() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=stack.https,
            verify=tls,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    def direct_client() -> httpx.AsyncClient:
        headers = signer.headers("runtime-api", deadline_ms=deadline, delegation=delegation)
        # plain HTTP; `verify=tls` only spares each client loading the default CA bundle
        # (~50 ms of CPU each, 50 of them inside the measured window)
        return httpx.AsyncClient(base_url=runtime, headers=headers, timeout=30, verify=tls)

    async def dialect_read(client: httpx.AsyncClient) -> int:
        reply = await client.get(
            f"/services/data/v{VERSION}/sobjects/Contact/{secrets.choice(ids)}"
        )
        return reply.status_code

    async def direct_read(client: httpx.AsyncClient) -> int:
        body = {"id": secrets.choice(ids), "object": "Contact"}
        return (await client.post("/internal/v1/runtime/records/read", json=body)).status_code

    async def dialect_query(client: httpx.AsyncClient) -> int:
        return (
            await client.get(f"/services/data/v{VERSION}/query", params={"q": SOQL})
        ).status_code

    async def direct_query(client: httpx.AsyncClient) -> int:
        return (await client.post("/internal/v1/runtime/query", json={"soql": SOQL})).status_code

    pids = role_pids(stack.env["NEXUS_VAR_DIR"])
    results: dict[str, Any] = {}
    for name, factory, call in (
        ("read_dialect_https", dialect_client, dialect_read),
        ("read_runtime_direct", direct_client, direct_read),
        ("query200_dialect_https", dialect_client, dialect_query),
        ("query200_runtime_direct", direct_client, direct_query),
    ):
        results[name] = await closed_loop(
            factory, call, concurrency=concurrency, seconds=seconds, pids=pids
        )
    for case in ("read", "query200"):
        direct = results[f"{case}_runtime_direct"]["p50_ms"] or 1e-9
        results[f"{case}_p50_ratio"] = round(results[f"{case}_dialect_https"]["p50_ms"] / direct, 2)
        served = results[f"{case}_dialect_https"]["cpu_ms_per_request"]
        alone = results[f"{case}_runtime_direct"]["cpu_ms_per_request"]
        if alone.get("runtime-api"):
            stack = sum(served.get(r, 0.0) for r in CPU_ROLES)
            results[f"{case}_server_cpu_ratio"] = round(stack / alone["runtime-api"], 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        extra = {"NEXUS_LOG_LEVEL": "warning", "NEXUS_API_DAILY_REQUEST_LIMIT": "100000000"}
        with sfcrm_stack(Path(tmp), Backend(name="sqlite"), **extra) as stack:
            ids = make_contacts(stack, args.rows)
            results = asyncio.run(measure(stack, ids, args.concurrency, args.seconds))
    print(
        json.dumps(
            {
                "bench": "sfcrm_rest",
                "backend": "sqlite",
                "concurrency": args.concurrency,
                "seconds": args.seconds,
                "rows": args.rows,
                "python": platform.python_version(),
                "ssl": ssl.OPENSSL_VERSION,
                **results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
