#!/usr/bin/env python
"""Webhook ingest: signed deliveries -> durable receipts, acknowledged after commit.

    .venv/bin/python bench/ingest.py [--backend sqlite|mariadb] [--seconds 10]
                                     [--rates 200,1000] [--conns 64]

One real `nexus serve --role=integration --loops=none` process (log level warning, so the
per-request access log does not dominate). Load comes from other processes:

* fixed rates: this script re-run as an open-loop generator (`--generate`, aiohttp): requests
  are scheduled at exact intervals and latency is measured from the scheduled time, so a
  stall is not hidden (no coordinated omission). Each request is a Standard Webhooks
  delivery (HMAC-SHA256 signed per request, unique `webhook-id`).
* max rate: `wrk` (closed loop, `--conns` connections, 1 thread) with a Lua script that sends
  a `shared_secret` route's delivery with a unique delivery id per request (signing HMAC in
  Lua is impractical; the server still checks the secret in constant time).

Afterwards the receipts in the database are counted and must equal the 2xx answers.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ORG = "00D000000000001AAA"
SECRET = "whsec_" + base64.b64encode(b"bench-ingest-key-0123456789abcdef").decode()
SHARED = "bench-shared-secret-0123456789"
ROUTES = {
    "org_id": ORG,
    "routes": [
        {
            "connector": "bench",
            "route": "signed",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["bench-signed"],
            "event_kind": {"pointer": "/type"},
        },
        {
            "connector": "bench",
            "route": "shared",
            "signature": {
                "scheme": "shared_secret",
                "header": "authorization",
                "prefix": "Bearer ",
                "delivery_id_header": "x-delivery-id",
            },
            "secrets": ["bench-shared"],
            "event_kind": {"header": "x-event"},
        },
    ],
}
BODY = json.dumps(
    {"type": "contact.updated", "data": {"id": "c-1", "email": "a@example.com", "n": 1}}
).encode()
UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}
WRK_LUA = """
local counter = 0
local tid = 0
function setup(thread) tid = tid + 1; thread:set("tid", tid) end
function init(args) prefix = "wrk-" .. tid .. "-" .. os.time() .. "-" end
function request()
  counter = counter + 1
  local headers = {}
  headers["Content-Type"] = "application/json"
  headers["Authorization"] = "Bearer %s"
  headers["X-Delivery-Id"] = prefix .. counter
  headers["X-Event"] = "contact.updated"
  return wrk.format("POST", "/hooks/bench/shared", headers, '%s')
end
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ok(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready")


# ---------------------------------------------------------------- open-loop generator


async def generate(
    url: str,
    rate: float,
    seconds: float,
    body_for: Callable[[int, int], bytes] | None = None,
) -> dict[str, float]:
    """`body_for(n, scheduled_epoch_ms)` gives request n its own body (default: BODY)."""
    import aiohttp

    from nexus.integration.routes import parse_route_file
    from nexus.integration.sender import signed_headers

    route = parse_route_file(ROUTES).routes[0]
    total = int(rate * seconds)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    connector = aiohttp.TCPConnector(limit=512)
    async with aiohttp.ClientSession(connector=connector) as session:
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.2
        epoch_ms = time.time() * 1000 - loop.time() * 1000  # loop clock -> wall clock
        run_id = f"{os.getpid()}-{int(time.time())}"

        async def one(n: int) -> None:
            scheduled = start + n / rate
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            body = BODY if body_for is None else body_for(n, round(epoch_ms + scheduled * 1000))
            headers = signed_headers(
                route, SECRET, body=body, url=url, delivery_id=f"gen-{run_id}-{n}"
            )
            try:
                async with session.post(url, data=body, headers=headers) as reply:
                    await reply.read()
                    status = reply.status
            except aiohttp.ClientError:
                status = 0
            latencies.append((loop.time() - scheduled) * 1000)
            statuses[status] = statuses.get(status, 0) + 1

        began = loop.time()
        await asyncio.gather(*(one(n) for n in range(total)))
        elapsed = loop.time() - began
    latencies.sort()
    ok = sum(v for k, v in statuses.items() if 200 <= k < 300)
    return {
        "offered_per_s": rate,
        "sent": total,
        "ok": ok,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "receipts_per_s": round(ok / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2], 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "max_ms": round(latencies[-1], 2),
    }


# ---------------------------------------------------------------- wrk (max rate)


def wrk(url: str, seconds: int, conns: int, script: Path) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def latency(label: str) -> float:
        match = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        return round(float(match.group(1)) * UNIT[match.group(2)], 2) if match else -1

    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    total = re.search(r"(\d+) requests in", out)
    return {
        "conns": conns,
        "requests": int(total.group(1)) if total else -1,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "receipts_per_s": float(rate.group(1)) if rate else -1,
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
    }


# ---------------------------------------------------------------- server-side latency

_BUCKET = re.compile(
    r'^nexus_http_request_duration_seconds_bucket\{le="([^"]+)",role="integration",'
    r'route="/hooks/\{connector\}/\{route\}"\} ([\d.e+]+)$',
    re.MULTILINE,
)


def server_buckets(base: str) -> dict[float, float]:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return {float(le): float(n) for le, n in _BUCKET.findall(text)}


def server_quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, str]:
    """p50/p99 of the server's own request latency in a phase, as histogram bucket bounds."""
    delta = sorted((le, after[le] - before.get(le, 0)) for le in after)
    total = delta[-1][1] if delta else 0
    out = {}
    for name, q in (("server_p50_ms_at_most", 0.5), ("server_p99_ms_at_most", 0.99)):
        le = next((le for le, n in delta if total and n >= q * total), float("inf"))
        out[name] = f"{le * 1000:g}"
    return out


# ---------------------------------------------------------------- orchestration


async def count_receipts(url: str) -> int:
    from sqlalchemy import func, select

    from nexus.integration import models as m
    from nexus.platform.db import create_engine

    engine = create_engine(url, application_name="bench")
    try:
        async with engine.connect() as conn:
            query = select(func.count()).select_from(m.ingress_receipt)
            return int((await conn.execute(query)).scalar_one())
    finally:
        await engine.dispose()


def run(db_url: str, args: argparse.Namespace, work: Path) -> dict[str, object]:
    import yaml

    from nexus.platform.secrets import write_webhook_secret

    var = work / "var"
    write_webhook_secret(var, "bench-signed", SECRET)
    write_webhook_secret(var, "bench-shared", SHARED)
    (work / "routes.yaml").write_text(yaml.safe_dump(ROUTES))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(var),
        NEXUS_INTEGRATION_DATABASE_URL=db_url,
        NEXUS_LOG_LEVEL="warning",
        NEXUS_LOG_FORMAT="json",
    )
    nexus = [sys.executable, "-m", "nexus"]
    subprocess.run([*nexus, "migrate", "--service", "integration"], env=env, check=True, cwd=ROOT)
    subprocess.run(
        [*nexus, "integration", "apply-routes", str(work / "routes.yaml")],
        env=env,
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    server = subprocess.Popen(
        [*nexus, "serve", "--role=integration", "--loops=none", f"--port={port}"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "server.log", "w"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{port}"
    results: dict[str, object] = {}
    ok_total = 0
    try:
        wait_ok(f"{base}/readyz")
        url = f"{base}/hooks/bench/signed"
        # warm-up: imports, pools, route cache
        subprocess.run(
            [sys.executable, __file__, "--generate", url, "100", "1"],
            check=True,
            capture_output=True,
        )
        ok_total += 100
        for rate in args.rates:
            before = server_buckets(base)
            done = subprocess.run(
                [sys.executable, __file__, "--generate", url, str(rate), str(args.seconds)],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(done.stdout) | server_quantiles(before, server_buckets(base))
            ok_total += int(row["ok"])
            results[f"rate_{rate}"] = row
        script = work / "shared.lua"
        script.write_text(WRK_LUA % (SHARED, BODY.decode()))
        before = server_buckets(base)
        row = wrk(f"{base}/hooks/bench/shared", args.seconds, args.conns, script)
        row |= server_quantiles(before, server_buckets(base))
        ok_total += int(row["requests"]) - int(row["non_2xx"])
        results["max_wrk"] = row
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        batches = re.search(
            r'nexus_ingress_batches_total\{outcome="committed"\} ([\d.e+]+)', metrics
        )
        results["transactions"] = int(float(batches.group(1))) if batches else -1
    finally:
        server.terminate()
        server.wait(timeout=30)
    stored = asyncio.run(count_receipts(db_url))
    results["receipts_in_db"] = stored
    results["acked_2xx"] = ok_total
    # wrk counts only answers it read before it stopped: up to `conns` requests were still in
    # flight, were stored, and were answered to nobody. Never fewer receipts than 2xx answers.
    results["every_ack_stored"] = ok_total <= stored <= ok_total + args.conns
    return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        url, rate, seconds = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
        print(json.dumps(asyncio.run(generate(url, rate, seconds))))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--rates", type=lambda s: [int(x) for x in s.split(",")], default=[200, 1000]
    )
    parser.add_argument("--conns", type=int, default=64)
    args = parser.parse_args()
    out: dict[str, object] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "backend": args.backend,
    }
    work = Path(tempfile.mkdtemp(prefix="nexus-bench-ingest-"))
    if args.backend == "sqlite":
        out["results"] = run(f"sqlite+aiosqlite:///{work}/integration.sqlite3", args, work)
    else:
        from tests.support.mariadb import find_server_binary, start_mariadb

        binary = find_server_binary()
        if binary is None:
            raise SystemExit("mariadbd not found")
        server = start_mariadb(binary)
        try:
            out["results"] = run(server.create_database("bench_ingest"), args, work)
        finally:
            server.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
