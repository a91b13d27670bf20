"""`nexus up` and `nexus serve` as a user runs them: real processes, real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from nexus.contracts.roles import ROLE_PORT_OFFSET, LogicalService, Role
from nexus.platform.settings import TLS_PORT_OFFSET
from nexus.platform.supervisor import pid_alive
from tests.conftest import Backend

pytestmark = pytest.mark.e2e
NEXUS = [sys.executable, "-m", "nexus"]
#: `nexus up` is ready within this much CPU time of its own processes (supervisor and roles,
#: measured from /proc): what start-up costs, whatever else the machine runs meanwhile.
READY_CPU_SECONDS = 30
#: ... and within this much wall time: a start that waits on something still fails.
READY_WITHIN_SECONDS = 60
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_LIMIT_SECONDS = 180  # `nexus up` that never says it is ready is killed (the test fails)
#: Opens the gateway's /metrics and /version, and /_roles/<role>/version.
OPS_TOKEN = "e2e-ops-token-0123456789abcdef0123456789"
ROLE_PATHS = {
    "runtime-api": "/_roles/runtime-api",
    "runtime-worker": "/_roles/runtime-worker",
    "catalog": "/_roles/catalog",
    "integration": "/_roles/integration",
    "app": "/_roles/app/sfcrm",
}


def free_port_base() -> int:
    """A base port with every role's port free (checked, not assumed)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + TLS_PORT_OFFSET > 65000:
            continue
        try:
            for offset in [*range(len(ROLE_PORT_OFFSET)), TLS_PORT_OFFSET]:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


def child_pids(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system, with their reaped children's) the processes have used."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICKS


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(tmp_path / "var"),
        NEXUS_LOG_FORMAT="json",
        NEXUS_GATEWAY_OPS_TOKEN=OPS_TOKEN,
        **extra,
    )
    return env


@contextmanager
def running_stack(
    tmp_path: Path,
    backend: Backend | None = None,
    *,
    https_issuer: bool = False,
    nexus: Sequence[str] = tuple(NEXUS),
    cwd: Path | None = None,
    **extra_env: str,
) -> Iterator[tuple[subprocess.Popen[str], int, float]]:
    """`nexus up` on free ports; yields (process, port base, seconds until ready).
    `https_issuer`: tokens name the gateway's HTTPS port (port base + 443) as instance URL.
    `nexus`: the command that runs the CLI (an installed wheel's `bin/nexus`), run in `cwd`."""
    base = free_port_base()
    if https_issuer:
        extra_env["NEXUS_PUBLIC_BASE_URL"] = f"https://127.0.0.1:{base + TLS_PORT_OFFSET}"
    env = clean_env(tmp_path, NEXUS_PORT_BASE=str(base), **extra_env)
    if backend is not None and backend.name == "mariadb":
        env.update(backend.env())
    started = time.monotonic()
    errors = tmp_path / "up.stderr"
    with (
        errors.open("w") as stderr,
        subprocess.Popen(
            [*nexus, "up"], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=cwd
        ) as proc,
    ):
        watchdog = threading.Timer(START_LIMIT_SECONDS, proc.kill)
        watchdog.start()
        try:
            lines = []
            while proc.stdout and not any("is ready at" in line for line in lines):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            watchdog.cancel()
            elapsed = time.monotonic() - started
            last = lines[-1] if lines else ""
            assert "is ready at" in last, f"nexus up did not become ready: {lines!r}"
            # the built-in sfcrm App is installed before the stack says it is ready
            installed = any(line.startswith("sfcrm 1.2.0: ACTIVE;") for line in lines)
            assert installed, f"stderr: {errors.read_text()[-1500:]!r}; stdout: {lines!r}"
            password = extra_env.get("NEXUS_BOOTSTRAP_ADMIN_PASSWORD") or next(
                line.split("password: ", 1)[1].strip() for line in lines if "password: " in line
            )
            token = httpx.post(
                f"http://127.0.0.1:{base}/services/oauth2/token",
                data={"grant_type": "password", "username": "admin", "password": password},
                timeout=10,
            )
            assert token.status_code == 200, token.text  # the printed first-admin password works
            yield proc, base, elapsed
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_up_serves_every_role_through_the_gateway_and_stops_cleanly(
    tmp_path: Path, backend: Backend
) -> None:
    # Integration looks for its Catalog snapshot every 0.5 s, not 5: the routes below sooner
    with running_stack(tmp_path, backend, NEXUS_INTEGRATION_CATALOG_POLL_SECONDS="0.5") as (
        proc,
        base,
        elapsed,
    ):
        _check_stack_then_stop(proc, base, elapsed)


def _post_hook(gateway: str) -> int:
    return httpx.post(f"{gateway}/webhooks/sfcrm/contacts", content=b"{}", timeout=5).status_code


def _check_stack_then_stop(proc: subprocess.Popen[str], base: int, elapsed: float) -> None:
    spent = cpu_seconds([proc.pid, *child_pids(proc.pid)])
    assert spent < READY_CPU_SECONDS, f"{spent:.1f} s of CPU until ready ({elapsed:.1f} s)"
    assert elapsed < READY_WITHIN_SECONDS
    gateway = f"http://127.0.0.1:{base}"
    ready = httpx.get(f"{gateway}/readyz", timeout=5)
    assert ready.status_code == 200
    assert all(check["ok"] for check in ready.json()["checks"])
    assert len(ready.json()["checks"]) == len(ROLE_PATHS)
    ops = {"authorization": f"Bearer {OPS_TOKEN}"}
    for role, prefix in ROLE_PATHS.items():
        version = httpx.get(f"{gateway}{prefix}/version", headers=ops, timeout=5)
        assert version.status_code == 200, role
        assert version.json()["role"] == role
        assert version.json()["engine_generation"] >= 1
        assert httpx.get(f"{gateway}{prefix}/version", timeout=5).status_code == 401
    assert httpx.get(f"{gateway}/version", headers=ops, timeout=5).json()["role"] == "gateway"
    assert httpx.get(f"{gateway}/version", timeout=5).status_code == 401
    # Integration fetched the sfcrm connector routes from Catalog by itself (ADR 0033): the
    # example route exists (no secret provisioned yet, so the unsigned delivery is refused)
    deadline = time.monotonic() + 20
    while (status := _post_hook(gateway)) == 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 401, status

    children = child_pids(proc.pid)
    assert len(children) == len(Role)  # one OS process per role
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in children if pid_alive(p)], "children outlived nexus up"


def test_a_killed_supervisor_takes_its_children_along(tmp_path: Path) -> None:
    with running_stack(tmp_path) as (proc, _base, _elapsed):
        children = child_pids(proc.pid)
        assert children
        proc.kill()  # SIGKILL: no chance to clean up; the kernel's parent-death signal acts
        proc.wait()
    deadline = time.monotonic() + 20
    while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in children if pid_alive(p)]


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nexus: error: ")
    return lines[0]


def test_unknown_role_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [*NEXUS, "serve", "--role=mailer"],
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "unknown role 'mailer'" in _one_line_error(result)


def test_malformed_database_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = clean_env(tmp_path, NEXUS_RUNTIME_DATABASE_URL="mysql+aiomysql://u:topsecret@:/")
    result = subprocess.run(
        [*NEXUS, "serve", "--role=runtime-api"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = _one_line_error(result)
    assert "NEXUS_RUNTIME_DATABASE_URL" in line
    assert "topsecret" not in result.stderr + result.stdout


@pytest.mark.parametrize("command", ["serve", "up"])
def test_occupied_port_is_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    base = free_port_base()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base))
        squatter.listen()
        argv = [*NEXUS, "serve", "--role=gateway"] if command == "serve" else [*NEXUS, "up"]
        result = subprocess.run(
            argv,
            env=clean_env(tmp_path, NEXUS_PORT_BASE=str(base)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert f"port {base} on 127.0.0.1 is already in use" in _one_line_error(result)


def test_serve_shuts_down_gracefully_on_sigterm(tmp_path: Path) -> None:
    port = free_port_base()
    with subprocess.Popen(
        [*NEXUS, "serve", "--role=app", "--app=sfcrm", f"--port={port}"],
        env=clean_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        _wait_healthy_then_sigterm(proc, port)


def _wait_healthy_then_sigterm(proc: subprocess.Popen[str], port: int) -> None:
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert "role.stopped" in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_migrate_reports_each_service_at_head(tmp_path: Path, backend: Backend) -> None:
    env = clean_env(tmp_path)
    if backend.name == "mariadb":
        env.update(backend.env())
    result = subprocess.run(
        [*NEXUS, "migrate"], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [s.value for s in LogicalService]
    assert all(line.split(": ", 1)[1].startswith("at ") for line in lines)
