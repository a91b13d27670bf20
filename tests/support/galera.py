"""A throwaway 3-node MariaDB Galera cluster on loopback ports (Debian's `galera-4`), for
`make test-galera`: every node a `mariadbd` like the single test server
(`tests/support/mariadb.py`), with wsrep on. The first node bootstraps the cluster; the
others join it and take a full state transfer (rsync) before they accept connections.
Multi-primary: every node takes writes; conflicting transactions on two nodes are certified
at COMMIT and the loser gets a deadlock error (1213).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.mariadb import MariaDB, free_port, start_mariadb

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")


def provider() -> Path | None:
    return PROVIDER if PROVIDER.is_file() else None


@dataclass
class Galera:
    nodes: list[MariaDB]

    def create_database(self, name: str) -> list[str]:
        """A database (created on the first node, replicated); its URL on every node."""
        first = self.nodes[0].create_database(name)
        return [first.replace(f":{self.nodes[0].port}/", f":{n.port}/") for n in self.nodes]

    def cluster_size(self) -> int:
        with self.nodes[-1].admin() as conn, conn.cursor() as cur:
            cur.execute("SHOW STATUS LIKE 'wsrep_cluster_size'")
            row = cur.fetchone()
        return int(row[1]) if row else 0

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


def start_galera(binary: str, nodes: int = 3) -> Galera:
    ports = [(free_port(), free_port(), free_port()) for _ in range(nodes)]  # gcomm, IST, SST
    members = ",".join(f"127.0.0.1:{gcomm}" for gcomm, _, _ in ports)
    started: list[MariaDB] = []
    try:
        for index, (gcomm, ist, sst) in enumerate(ports):
            args = [
                "--binlog-format=ROW",
                "--default-storage-engine=InnoDB",
                "--innodb-autoinc-lock-mode=2",
                "--wsrep-on=ON",
                f"--wsrep-provider={PROVIDER}",
                "--wsrep-cluster-name=nexus-test",
                f"--wsrep-node-name=node{index + 1}",
                f"--wsrep-node-address=127.0.0.1:{gcomm}",
                f"--wsrep-cluster-address=gcomm://{'' if index == 0 else members}",
                f"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{gcomm};"
                f"ist.recv_addr=127.0.0.1:{ist}",
                "--wsrep-sst-method=rsync",
                f"--wsrep-sst-receive-address=127.0.0.1:{sst}",
                "--wsrep-slave-threads=2",
            ]
            if index == 0:
                args.append("--wsrep-new-cluster")
            started.append(start_mariadb(binary, extra_args=args, shared_datadir=True))
    except BaseException:
        for node in reversed(started):
            node.stop()
        raise
    return Galera(started)
