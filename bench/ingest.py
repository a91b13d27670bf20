#!/usr/bin/env python
"""Webhook ingest: signed deliveries -> durable receipts, acknowledged after commit.

    .venv/bin/python bench/ingest.py [--backend sqlite|mariadb] [--seconds 10]
                                     [--rates 200,1000] [--conns 64]

One real `nexus serve --role=integration --loops=none` process (log level warning, so the
per-request access log does not dominate). Load comes from other processes:

* fixed rates: this script re-run as an open-loop generator (`--generate`: plain asyncio
  protocols on keep-alive connections, opened as needed up to 512, so the generator itself
  needs little CPU): requests are scheduled at exact intervals and latency is measured from
  the scheduled time, so a stall is not hidden (no coordinated omission). Each request is a
  Standard Webhooks delivery, HMAC-SHA256 signed when it is sent (the product's own signing
  code), with a unique `webhook-id`.
* max rate: `wrk` (closed loop, `--conns` connections, 1 thread) with a Lua script that
  sends the same route's deliveries, each with the next of a file of pre-signed unique ids
  (HMAC in wrk's Lua is impractical; the server verifies every signature as usual).

Every phase also records the 1-minute load average before and after (other work may share
the machine) and the server process's CPU time per receipt. Afterwards the receipts in the
database are counted and must equal the 2xx answers. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
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
    ],
}
BODY = json.dumps(
    {"type": "contact.updated", "data": {"id": "c-1", "email": "a@example.com", "n": 1}}
).encode()
UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}
WRK_LUA = """
-- Each request: the next pre-signed Standard Webhooks delivery (unique webhook-id); wraps
-- around only if the run outlasts the file (then the server counts duplicates).
local body = '%s'
local signed = {}
local next_one = 1
function init(args)
  for line in io.lines("%s") do
    local id, stamp, sig = line:match("([^\t]+)\t([^\t]+)\t([^\t]+)")
    signed[#signed + 1] = {id, stamp, sig}
  end
end
function request()
  local s = signed[next_one]
  next_one = next_one %% #signed + 1
  local headers = {}
  headers["Content-Type"] = "application/json"
  headers["webhook-id"] = s[1]
  headers["webhook-timestamp"] = s[2]
  headers["webhook-signature"] = s[3]
  return wrk.format("POST", "/hooks/bench/signed", headers, body)
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


def signer() -> tuple[object, bytes]:
    """The bench route's scheme and key, through the product's own signing code."""
    from nexus.integration.routing.routes import parse_route_file

    scheme = parse_route_file(ROUTES).routes[0].scheme
    return scheme, scheme.derive_key(SECRET)  # type: ignore[attr-defined]


def request_bytes(path: str, host: str, headers: dict[str, str], body: bytes = BODY) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class _Client(asyncio.Protocol):
    """One keep-alive connection, one request in flight, just enough HTTP/1.1 to read a reply."""

    def __init__(self, gen: _OpenLoop) -> None:
        self.gen = gen
        self.buf = bytearray()
        self.scheduled = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.gen.ready(self)

    def send(self, scheduled: float, data: bytes) -> None:
        self.scheduled = scheduled
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).lower()
        at = head.find(b"content-length:")
        length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(self.buf) < end + 4 + length:
            return
        status = int(head[9:12])
        del self.buf[: end + 4 + length]
        self.gen.answered(self, status)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gen.lost(self)


#: Time planned for signing and building one request before the run starts (~30 us measured).
PREBUILD_S_PER_REQUEST = 0.0002


class _OpenLoop:
    """Requests at exact scheduled times; latency from the scheduled time (no coordinated
    omission): a request that finds no idle connection waits in a queue and the wait counts."""

    def __init__(
        self,
        url: str,
        rate: float,
        seconds: float,
        max_conns: int,
        body_for: Callable[[int, int], bytes] | None = None,
    ) -> None:
        from urllib.parse import urlsplit

        self.body_for = body_for
        self.epoch_offset = time.time() - time.perf_counter()  # scheduled -> epoch seconds

        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port or 80, parts.path
        self.url, self.rate, self.total, self.max_conns = url, rate, int(rate * seconds), max_conns
        self.scheme, self.key = signer()
        self.loop = asyncio.get_running_loop()
        self.idle: list[_Client] = []
        self.queue: collections.deque[tuple[float, int]] = collections.deque()
        self.conns = 0
        self.latencies: list[float] = []
        self.statuses: collections.Counter[int] = collections.Counter()
        self.finished = self.loop.create_future()
        self.run_id = f"{os.getpid()}-{int(time.time())}"
        self.requests: list[bytes] = []
        self.start = 0.0

    def build(self, n: int, scheduled: float) -> bytes:
        body = BODY
        if self.body_for is not None:
            body = self.body_for(n, round((self.epoch_offset + scheduled) * 1000))
        headers = self.scheme.headers_for(  # type: ignore[attr-defined]
            self.key,
            body=body,
            method="POST",
            url=self.url,
            now=time.time(),
            delivery_id=f"gen-{self.run_id}-{n}",
        )
        return request_bytes(self.path, f"{self.host}:{self.port}", headers, body)

    def dispatch(self, scheduled: float, n: int) -> None:
        if self.idle:
            self.idle.pop().send(scheduled, self.requests[n])
            return
        self.queue.append((scheduled, n))
        if self.conns < self.max_conns:
            self.conns += 1
            opening = self.loop.create_task(
                self.loop.create_connection(lambda: _Client(self), self.host, self.port)
            )
            opening.add_done_callback(self.opened)

    def opened(self, opening: asyncio.Task[object]) -> None:
        if opening.cancelled() or opening.exception() is None:
            return
        self.conns -= 1  # could not connect: the request it was opened for fails
        if self.queue:
            scheduled, _ = self.queue.popleft()
            self.record(scheduled, 0)

    def ready(self, client: _Client) -> None:
        if self.queue:
            scheduled, n = self.queue.popleft()
            client.send(scheduled, self.requests[n])
        else:
            self.idle.append(client)

    def answered(self, client: _Client, status: int) -> None:
        self.record(client.scheduled, status)
        self.ready(client)

    def record(self, scheduled: float, status: int) -> None:
        self.latencies.append((time.perf_counter() - scheduled) * 1000)
        self.statuses[status] += 1
        if len(self.latencies) == self.total and not self.finished.done():
            self.finished.set_result(None)

    def lost(self, client: _Client) -> None:
        if client in self.idle:
            self.idle.remove(client)
        else:  # closed with a request in flight: it failed
            self.record(client.scheduled, 0)
        self.conns -= 1

    def prepare(self) -> None:
        """Sign and build every request before the first is sent (the bodies carry their
        scheduled send times, so the schedule is fixed first): the generator's CPU during the
        run is then sockets only, which leaves the box's cores to the stack under test.
        Signatures are at most the run's length old when sent, well inside the tolerance."""
        # perf_counter, not loop.time(): uvloop's clock has millisecond resolution.
        self.start = time.perf_counter() + 0.2 + self.total * PREBUILD_S_PER_REQUEST
        self.requests = [self.build(n, self.start + n / self.rate) for n in range(self.total)]

    async def run(self) -> float:
        start = self.start
        if time.perf_counter() > start:
            raise RuntimeError("building the requests took longer than planned")
        for n in range(self.total):
            scheduled = start + n / self.rate
            delay = scheduled - time.perf_counter()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            self.dispatch(scheduled, n)
        await asyncio.wait_for(self.finished, timeout=60)
        return time.perf_counter() - start


async def generate(
    url: str,
    rate: float,
    seconds: float,
    body_for: Callable[[int, int], bytes] | None = None,
) -> dict[str, object]:
    """`body_for(n, scheduled_epoch_ms)` gives request n its own body (default: BODY)."""
    gen = _OpenLoop(url, rate, seconds, max_conns=512, body_for=body_for)
    gen.prepare()
    cpu = time.process_time()
    elapsed = await gen.run()
    cpu = time.process_time() - cpu
    latencies = sorted(gen.latencies)
    ok = sum(v for k, v in gen.statuses.items() if 200 <= k < 300)
    return {
        "offered_per_s": rate,
        "sent": gen.total,
        "ok": ok,
        "statuses": {str(k): v for k, v in sorted(gen.statuses.items())},
        "receipts_per_s": round(ok / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2], 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "max_ms": round(latencies[-1], 2),
        "connections": gen.conns,
        "generator_cpu_s": round(cpu, 2),
    }


# ---------------------------------------------------------------- wrk (max rate)


def presigned(path: Path, count: int) -> None:
    """`count` Standard Webhooks signatures (id, timestamp, signature per line) for wrk's Lua:
    HMAC in Lua is impractical, so the signing is done here, before the run."""
    scheme, key = signer()
    run_id = f"{os.getpid()}-{int(time.time())}"
    with path.open("w") as out:
        for n in range(count):
            headers = scheme.headers_for(  # type: ignore[attr-defined]
                key,
                body=BODY,
                method="POST",
                url="",
                now=time.time(),
                delivery_id=f"wrk-{run_id}-{n}",
            )
            out.write(
                f"{headers['webhook-id']}\t{headers['webhook-timestamp']}\t"
                f"{headers['webhook-signature']}\n"
            )


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


# ---------------------------------------------------------------- machine notes


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Phase:
    """Load average and the server's CPU time over one phase: other work shares this
    machine, and CPU per receipt is the number that does not depend on it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = cpu_seconds(pid)
        self.load = os.getloadavg()[0]

    def end(self, receipts: int) -> dict[str, float]:
        cpu = cpu_seconds(self.pid) - self.cpu
        return {
            "load_1m_before_after": [round(self.load, 2), round(os.getloadavg()[0], 2)],
            "server_cpu_us_per_receipt": round(cpu / max(receipts, 1) * 1e6, 1),
        }


# ---------------------------------------------------------------- orchestration


async def count_receipts(url: str) -> int:
    from sqlalchemy import func, select

    from nexus.integration.ingress import models as ingress_tables
    from nexus.platform.db.engine import create_engine

    engine = create_engine(url, application_name="bench")
    try:
        async with engine.connect() as conn:
            query = select(func.count()).select_from(ingress_tables.ingress_receipt)
            return int((await conn.execute(query)).scalar_one())
    finally:
        await engine.dispose()


def run(db_url: str, args: argparse.Namespace, work: Path) -> dict[str, object]:
    import yaml

    from nexus.platform.secrets import write_webhook_secret

    var = work / "var"
    write_webhook_secret(var, "bench-signed", SECRET)
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
            before, machine = server_buckets(base), Phase(server.pid)
            done = subprocess.run(
                [sys.executable, __file__, "--generate", url, str(rate), str(args.seconds)],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(done.stdout) | server_quantiles(before, server_buckets(base))
            ok_total += int(row["ok"])
            results[f"rate_{rate}"] = row | machine.end(int(row["ok"]))
        signatures = work / "signed.tsv"
        presigned(signatures, args.seconds * 20_000)  # ~2x the fastest run seen
        script = work / "signed.lua"
        script.write_text(WRK_LUA % (BODY.decode(), signatures))
        before, machine = server_buckets(base), Phase(server.pid)
        row = wrk(url, args.seconds, args.conns, script)
        row |= server_quantiles(before, server_buckets(base))
        acked = int(row["requests"]) - int(row["non_2xx"])
        ok_total += acked
        results["max_wrk"] = row | machine.end(acked)
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        batches = re.search(
            r'nexus_ingress_batches_total\{outcome="committed"\} ([\d.e+]+)', metrics
        )
        results["transactions"] = int(float(batches.group(1))) if batches else -1
        duplicates = re.findall(
            r'nexus_ingress_receipts_total\{[^}]*outcome="duplicate"[^}]*\} ([\d.e+]+)', metrics
        )
        redeliveries = sum(int(float(d)) for d in duplicates)
        results["redeliveries"] = redeliveries
    finally:
        server.terminate()
        server.wait(timeout=30)
    stored = asyncio.run(count_receipts(db_url))
    results["receipts_in_db"] = stored
    results["acked_2xx"] = ok_total
    # wrk counts only answers it read before it stopped: up to `conns` requests were still in
    # flight, were stored, and were answered to nobody. A run that outlasts the pre-signed
    # file sends ids again: those are redeliveries (the same 2xx, counted, not stored twice).
    # Never fewer receipts than first-time 2xx answers.
    first_time = ok_total - redeliveries
    results["every_ack_stored"] = first_time <= stored <= first_time + args.conns
    return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        url, rate, seconds = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
        import uvloop

        print(json.dumps(uvloop.run(generate(url, rate, seconds))))
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
