#!/usr/bin/env python
"""Gateway proxy overhead: the same GET straight to a role and through the gateway.

    .venv/bin/python bench/gateway_overhead.py [--seconds 10] [--conns 32] [--runs 3]

Starts two real processes (`nexus serve --role=app --app=sfcrm` and `nexus serve
--role=gateway`, log level warning so access logs do not dominate), drives them with wrk
(1 thread, closed loop) on 127.0.0.1, and prints one JSON row per target and run plus the
median ratio proxied/direct. Needs `wrk` (apt-get install wrk). Everything stops at the end.
"""

from __future__ import annotations

import argparse
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

import httpx

UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--conns", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

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
