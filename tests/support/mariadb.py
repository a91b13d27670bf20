"""A throwaway MariaDB server for one test session, started from the `mariadbd` binary.

No system service and no fixed port: a fresh data directory under a temporary folder, a free
loopback port, and a socket file beside it. Stopped (and its files removed) at session end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pymysql

USER = "nexus"
PASSWORD = "nexus-test-password"


def find_server_binary() -> str | None:
    for name in ("mariadbd", "mysqld"):
        found = shutil.which(name) or next(
            (p for p in (f"/usr/sbin/{name}", f"/usr/libexec/{name}") if os.access(p, os.X_OK)),
            None,
        )
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MariaDB:
    port: int
    socket_path: str
    process: subprocess.Popen[bytes]
    root: Path
    argv: list[str] | None = None

    def admin(self) -> pymysql.connections.Connection:
        return pymysql.connect(unix_socket=self.socket_path, user="root", password="")

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its SQLAlchemy URL for the app user."""
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        return f"mysql+aiomysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{name}"

    def drop_database(self, name: str) -> None:
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server (clients see their connections drop), stay down, start it again
        on the same port, socket and data: a database restart in the middle of a run."""
        assert self.argv is not None
        self.process.terminate()
        self.process.wait(timeout=60)
        time.sleep(down_seconds)
        self.process = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while not _accepts(self.socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mariadbd did not come back after a restart")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _accepts(socket_path: str) -> bool:
    """Probe the server socket without a client library (no half-open client to leak)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(socket_path)
        except OSError:
            return False
    return True


def start_mariadb(
    binary: str,
    *,
    durable: bool = False,
    extra_args: Sequence[str] = (),
    shared_datadir: bool = False,
) -> MariaDB:
    """A throwaway server. `durable`: the redo log is flushed at every commit
    (`innodb_flush_log_at_trx_commit=1`, MariaDB's own default, what a production server
    runs); otherwise once a second (2: the tests' setting, a commit survives a server crash
    but not the machine's). `shared_datadir`: other users may write the data directory (a
    Galera joiner receives its state from an rsync daemon that runs as `nobody`)."""
    root = Path(tempfile.mkdtemp(prefix="nexus-mariadb-"))
    datadir, sock, log = root / "data", str(root / "mysqld.sock"), root / "error.log"
    install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if install is None:
        raise RuntimeError("mariadb-install-db not found beside the server binary")
    user_args = ["--user=root"] if os.geteuid() == 0 else []
    subprocess.run(
        [
            install,
            "--no-defaults",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *user_args,
        ],
        check=True,
        capture_output=True,
    )
    if shared_datadir:
        root.chmod(0o755)
        for path in [datadir, *datadir.rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
    port = free_port()
    argv = [
        binary,
        "--no-defaults",
        f"--datadir={datadir}",
        f"--socket={sock}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--pid-file={root / 'mysqld.pid'}",
        f"--log-error={log}",
        "--skip-log-bin",
        "--innodb-buffer-pool-size=128M",
        f"--innodb-flush-log-at-trx-commit={1 if durable else 2}",
        "--character-set-server=utf8mb4",
        "--max-connections=500",
        *user_args,
        *extra_args,
    ]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = MariaDB(port=port, socket_path=sock, process=process, root=root, argv=argv)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"mariadbd exited during start-up:\n{detail}")
        if not _accepts(sock):
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("mariadbd did not accept connections within 60 s")
            time.sleep(0.1)
            continue
        try:
            with server.admin() as conn, conn.cursor() as cur:
                cur.execute(
                    f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY %s", (PASSWORD,)
                )
                cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1'")
            return server
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.2)
