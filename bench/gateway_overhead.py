#!/usr/bin/env python
"""Gateway proxy overhead: the same GET straight to a role and through the gateway; or the
gateway's CPU per relayed webhook POST.

    .venv/bin/python bench/gateway_overhead.py [--seconds 10] [--conns 32] [--runs 3]
    .venv/bin/python bench/gateway_overhead.py --cpu [--requests 10000] [--rate 500]
        [--conns 32] [--runs 3] [--baseline-src DIR]

Default mode: starts two real processes (`nexus serve --role=app --app=sfcrm` and `nexus serve
--role=gateway`, log level warning so access logs do not dominate), drives them with wrk
(1 thread, closed loop) on 127.0.0.1, and prints one JSON row per target and run plus the
median ratio proxied/direct. Needs `wrk` (apt-get install wrk). Everything stops at the end.

`--cpu [--rate R]`: starts a trivial upstream (uvicorn, bare ASGI, answers 202 with a small
JSON body) standing in for integration and a gateway (`nexus serve --role=gateway`), sends
`--requests` POSTs of a ~300-byte JSON body to `/webhooks/...` over `--conns` keep-alive
connections (raw asyncio client, one request in flight per connection, paced to `--rate`
requests/s if given: the end-to-end bench's 500/s is the realistic setting, as CPU per
request falls when requests batch up at full speed), and reports the gateway process's CPU
(utime + stime from /proc/<pid>/stat) per request. With `--baseline-src DIR` a second
gateway runs from the source tree DIR (cwd and PYTHONPATH, e.g. a copy of `nexus/` with the
old gateway files) and the two are measured alternately in the same run, so machine drift
hits both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}
#: A webhook body of the size the end-to-end bench sends (~300 bytes of JSON).
WEBHOOK_BODY = json.dumps(
    {
        "event": "contact.updated",
        "delivery_id": "d-00000000-0000-0000-0000-000000000000",
        "occurred_at": "2026-12-01T12:00:00Z",
        "contact": {
            "external_id": "C-000000",
            "first_name": "Ada",
            "last_name": "Lovelace",
            "email": "ada.lovelace@example.com",
            "phone": "+44 20 7946 0000",
            "account_external_id": "A-000000",
        },
        "signature_hint": "x" * 40,
    }
).encode()
UPSTREAM_REPLY = b'{"receipt_id":"r-0000000000000000000000","status":"accepted","duplicate":false}'
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


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


def wrk(url: str, seconds: int, conns: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))

    def ms(value: str) -> float:
        number, unit = re.match(r"([\d.]+)(\w+)", value).groups()  # type: ignore[union-attr]
        return float(number) * UNIT[unit]

    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": rps,
        "p50_ms": ms(lat["50"]),
        "p99_ms": ms(lat["99"]),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


async def tiny_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Stands in for integration: reads the body, answers 202 with a small JSON body."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body", False):
        pass
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(UPSTREAM_REPLY)).encode()),
    ]
    status = 200 if scope["path"] in ("/readyz", "/healthz") else 202
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": UPSTREAM_REPLY})


def serve_upstream(port: int) -> int:
    import uvicorn

    from nexus.platform.serving import server_config

    config = server_config(tiny_upstream, host="127.0.0.1", port=port, log_level="warning")
    uvicorn.Server(config).run()
    return 0


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def post_webhooks(port: int, total: int, conns: int, rate: float = 0.0) -> tuple[int, float]:
    """`total` POSTs over `conns` keep-alive connections, each waiting for its answer; paced
    to `rate` requests per second overall (0: as fast as answers come). (non-202s, seconds)"""
    request = (
        b"POST /webhooks/sfcrm/contacts HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
        % (len(WEBHOOK_BODY), WEBHOOK_BODY)
    )
    failures = 0

    async def one_connection(count: int, offset: float) -> None:
        nonlocal failures
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        interval = conns / rate if rate else 0.0
        due = time.perf_counter() + offset
        for _ in range(count):
            if interval:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                due += interval
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 202"):
                failures += 1
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
        writer.close()

    started = time.perf_counter()
    shares = [total // conns + (1 if n < total % conns else 0) for n in range(conns)]
    offsets = [n / rate if rate else 0.0 for n in range(conns)]  # spread over the interval
    await asyncio.gather(*(one_connection(*job) for job in zip(shares, offsets, strict=True)))
    return failures, time.perf_counter() - started


def cpu_mode(args: argparse.Namespace) -> int:
    upstream_port = free_port()
    var = tempfile.mkdtemp(prefix="nexus-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=var,
        NEXUS_LOG_LEVEL="warning",
        NEXUS_LOG_FORMAT="json",
        NEXUS_INTEGRATION_URL=f"http://127.0.0.1:{upstream_port}",
    )
    here = Path(__file__).resolve()
    gateways = {"new": (Path.cwd(), free_port())}
    if args.baseline_src:
        gateways = {"old": (Path(args.baseline_src).resolve(), free_port()), **gateways}
    procs = [start([sys.executable, str(here), "--serve-upstream", str(upstream_port)], env)]
    gateway_pids: dict[str, int] = {}
    for name, (src, port) in gateways.items():
        gateway_env = env | {"PYTHONPATH": str(src)}
        argv = [sys.executable, "-m", "nexus", "serve", "--role=gateway", f"--port={port}"]
        proc = subprocess.Popen(
            argv, env=gateway_env, cwd=src, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        procs.append(proc)
        gateway_pids[name] = proc.pid
    rows: dict[str, list[float]] = {name: [] for name in gateways}
    try:
        wait_ok(f"http://127.0.0.1:{upstream_port}/healthz")
        for _, port in gateways.values():
            wait_ok(f"http://127.0.0.1:{port}/healthz")
            asyncio.run(post_webhooks(port, 1000, args.conns))  # warm-up
        for run in range(args.runs):
            for name, (_, port) in gateways.items():  # interleaved, so drift hits both
                pid = gateway_pids[name]
                before = process_cpu_seconds(pid)
                failures, seconds = asyncio.run(
                    post_webhooks(port, args.requests, args.conns, args.rate)
                )
                cpu_ms = (process_cpu_seconds(pid) - before) * 1e3 / args.requests
                rows[name].append(cpu_ms)
                row = {
                    "gateway": name,
                    "run": run,
                    "requests": args.requests,
                    "non_202": failures,
                    "rps": round(args.requests / seconds),
                    "gateway_cpu_ms_per_request": round(cpu_ms, 4),
                }
                print(json.dumps(row), flush=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    summary: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cpu {platform.python_version()}",
        "median_gateway_cpu_ms_per_request": {
            name: round(statistics.median(values), 4) for name, values in rows.items()
        },
    }
    print(json.dumps(summary, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--conns", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="gateway CPU per relayed webhook")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0.0, help="--cpu: requests/s (0: max)")
    parser.add_argument("--baseline-src", help="also measure the gateway of this source tree")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        return serve_upstream(args.serve_upstream)
    if args.cpu:
        return cpu_mode(args)

    app_port, gw_port = free_port(), free_port()
    var = tempfile.mkdtemp(prefix="nexus-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=var,
        NEXUS_LOG_LEVEL="warning",
        NEXUS_LOG_FORMAT="json",
        NEXUS_APP_SFCRM_URL=f"http://127.0.0.1:{app_port}",
    )
    nexus = [sys.executable, "-m", "nexus", "serve"]
    procs = [
        start([*nexus, "--role=app", "--app=sfcrm", f"--port={app_port}"], env),
        start([*nexus, "--role=gateway", f"--port={gw_port}"], env),
    ]
    targets = {
        "direct": f"http://127.0.0.1:{app_port}/healthz",
        "gateway_own": f"http://127.0.0.1:{gw_port}/healthz",
        "proxied": f"http://127.0.0.1:{gw_port}/_roles/app/sfcrm/healthz",
    }
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    try:
        for url in targets.values():
            wait_ok(url)
        for run in range(args.runs):
            for name, url in targets.items():  # interleaved, so drift hits every target
                result = wrk(url, args.seconds, args.conns)
                rows[name].append(result)
                print(json.dumps({"target": name, "run": run, **result}), flush=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    median = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
    summary = {
        "machine": f"{platform.node()} {os.cpu_count()} cpu {platform.python_version()}",
        "median": median,
        "proxied_over_direct_rps": round(median["proxied"]["rps"] / median["direct"]["rps"], 3),
        "added_p50_ms": round(median["proxied"]["p50_ms"] - median["direct"]["p50_ms"], 2),
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
