"""Every SQL feature Nexus emits, checked against TiDB's documented MySQL differences.

TiDB cannot be installed here, so this reads what Nexus sends a MySQL-family server: every
statement of every service's migrations to head, and of the work engine's whole cycle
(enqueue with lanes, claims with parking, renewals, completions with promotions, reclaims,
replay, skip, release, transfer) and of the webhook receipt writer, captured from the driver
on MariaDB; plus the raw SQL written into the source tree. Each statement is matched against
the features TiDB lacks or treats differently (docs.pingcap.com, "MySQL Compatibility" and
"Pessimistic Transaction Mode", TiDB 7.x/8.x):

    unsupported     fails the test wherever it appears
    guarded         allowed only in the listed modules, which take another path on TiDB
                    (the test checks that path)

The test prints the features it found, so a new one shows up in the log before it fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import MetaData, event
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.ingress.repository import ReceiptRow, store_receipts
from nexus.platform.db.backend import skips_locked
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.workqueue import operate
from nexus.platform.workqueue.families import transfer
from nexus.platform.workqueue.store import (
    DEAD,
    SUCCESS,
    TERMINAL,
    NewItem,
    Outcome,
    QueuePolicy,
    WorkStore,
)
from nexus.platform.workqueue.tables import work_tables
from nexus.runtime.search.engine import Token, choose_mode
from tests.conftest import Backend

pytestmark = [pytest.mark.mariadb_only, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Difference:
    name: str
    emitted: re.Pattern[str]  # in a statement sent to the server (any case)
    written: re.Pattern[str]  # in the source tree (SQL keywords upper case, or the API call)
    tidb: str  # what TiDB does
    guarded_in: tuple[str, ...] = ()  # modules allowed to emit it (they branch on TiDB)


def rule(name: str, emitted: str, written: str, tidb: str, *guarded_in: str) -> Difference:
    return Difference(name, re.compile(emitted, re.I), re.compile(written), tidb, guarded_in)


DIFFERENCES = (
    rule(
        "FULLTEXT index / MATCH ... AGAINST",
        r"\bFULLTEXT\b|\bAGAINST\s*\(",
        r"FULLTEXT|AGAINST\s*\(|\.c\.\w+\.match\(",
        "no FULLTEXT indexes or MATCH ... AGAINST",
        "nexus/migrations/runtime/versions/runtime_0005_search.py",
        "nexus/runtime/search/",
        "nexus/platform/db/backend.py",  # names the capability, emits nothing
    ),
    rule(
        "SKIP LOCKED",
        r"\bSKIP\s+LOCKED\b",
        r"[\"'][^\"'\n`]*SKIP LOCKED|skip_locked\s*=\s*True",  # a string, not a comment
        "parsed and ignored: concurrent claims would read the same rows",
        # the reclaim sweep: not a claim (each row is a CAS on its token), only passes over
        # rows a frozen holder keeps locked, and only where `skips_locked` (never TiDB)
        "nexus/platform/workqueue/store.py",
        "nexus/platform/db/backend.py",
    ),
    rule(
        "NOWAIT",
        r"\bNOWAIT\b",
        r"\bNOWAIT\b|nowait\s*=\s*True",
        "FOR UPDATE NOWAIT only in pessimistic transactions",
    ),
    rule(
        "shared row locks",
        r"\bLOCK\s+IN\s+SHARE\s+MODE\b|\bFOR\s+SHARE\b",
        r"LOCK IN SHARE MODE|FOR SHARE|with_for_update\(\s*read\s*=\s*True",
        "a no-op (an error unless tidb_enable_noop_functions): no lock is taken",
    ),
    rule("LOCK TABLES", r"^\s*LOCK\s+TABLES?\b", r"LOCK TABLES?\b", "only with enable-table-lock"),
    rule(
        "GET_LOCK",
        r"\b(GET|RELEASE)_LOCK\s*\(",
        r"\b(GET|RELEASE)_LOCK\(",
        "user-level locks: limited",
    ),
    rule(
        "triggers, procedures, events",
        r"\bCREATE\s+(DEFINER\s*=\s*\S+\s+)?(TRIGGER|PROCEDURE|FUNCTION|EVENT)\b",
        r"CREATE (TRIGGER|PROCEDURE|FUNCTION|EVENT)\b",
        "not supported",
    ),
    rule(
        "XA transactions",
        r"^\s*XA\s+(START|BEGIN|END|PREPARE|COMMIT)\b",
        r"[\"']XA (START|BEGIN)",
        "not supported",
    ),
    rule(
        "spatial types",
        r"\b(GEOMETRY|LINESTRING|POLYGON)\b|\bSPATIAL\s+(INDEX|KEY)\b",
        r"geoalchemy|SPATIAL (INDEX|KEY)",
        "not supported",
    ),
    rule(
        "CHECK constraints relied on",
        r"\bCHECK\s*\(",
        r"CheckConstraint\(|\bCHECK \(",
        "parsed, enforced only with tidb_enable_check_constraint (off by default)",
    ),
    rule(
        "MariaDB-only session variables",
        r"\b(idle_write_transaction_timeout|in_predicate_conversion_threshold)\s*=",
        r"SET SESSION (idle_write_transaction_timeout|in_predicate_conversion_threshold)",
        "an unknown variable: an error",
        "nexus/platform/db/engine.py",
    ),
)

#: Features TiDB has that a reader might doubt; listed so the log names them as checked.
SUPPORTED = (
    ("INSERT IGNORE / ON DUPLICATE KEY UPDATE", r"\bINSERT\s+IGNORE\b|\bON\s+DUPLICATE\s+KEY\b"),
    ("multi-table UPDATE", r"^UPDATE\s+\S+\s*,\s*\S+\s+SET\b"),
    ("row constructors (a, b) IN ((...))", r"\)\s+IN\s+\(\s*\("),
    # claim turns lock the queue row: TiDB takes the lock in pessimistic transactions, its
    # default since v3.0.8 (the claim itself is a CAS, correct in either mode)
    ("SELECT ... FOR UPDATE", r"\bFOR\s+UPDATE\b"),
    ("SAVEPOINT (TiDB >= 6.2)", r"\bSAVEPOINT\b"),
    ("FOREIGN KEY (enforced since TiDB 6.6)", r"\bFOREIGN\s+KEY\b"),
    ("binary collation utf8mb4_bin", r"\butf8mb4_bin\b"),
    ("UNHEX / UNIX_TIMESTAMP / NOW(3)", r"\bUNHEX\s*\(|\bUNIX_TIMESTAMP\s*\(|\bNOW\s*\(\s*3\s*\)"),
    (
        "STRAIGHT_JOIN, FORCE INDEX (the lane followers' read)",
        r"\bSTRAIGHT_JOIN\b.*\bFORCE INDEX\b",
    ),
)


@dataclass
class Captured:
    statements: list[str]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def captured(backend: Backend) -> AsyncIterator[Captured]:
    statements: list[str] = []

    def capture(_c: Any, _cursor: Any, sql: str, _p: Any, _ctx: Any, _many: bool) -> None:
        statements.append(sql)

    engines: list[AsyncEngine] = []
    for service in LogicalService:
        engine = create_engine(backend.url(service), application_name="tidb-check")
        engines.append(engine)
        event.listen(engine.sync_engine, "before_cursor_execute", capture)
        await upgrade_to_head(engine, service)
    integration = engines[list(LogicalService).index(LogicalService.INTEGRATION)]
    await work_cycle(integration)
    await receipts(integration)
    yield Captured(statements)
    for engine in engines:
        await engine.dispose()


async def work_cycle(engine: AsyncEngine) -> None:
    """The work engine's every statement kind, on its own tables."""
    tables = work_tables(MetaData(), "tidb_work")
    async with engine.begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.create)
    store = WorkStore(tables, owner="a", lease_ms=60_000)
    family = "org1/tidb"
    async with engine.begin() as conn:
        await store.ensure_queue(conn, family, "q", policy=QueuePolicy(max_attempts=2))
        await store.enqueue(
            conn,
            [NewItem(family, "q", "{}", lane_key="L", target_key="T") for _ in range(3)]
            + [NewItem(family, "q", "{}", target_key="T") for _ in range(2)],
        )
    async with engine.begin() as conn:
        got = await store.claim(conn, family, "q", 1, 10)
        assert got
        await store.renew(conn, family, 1, got[0].token, [c.id for c in got], target_keys={"T"})
        await store.finish(conn, family, 1, got[0].token, [(c, SUCCESS) for c in got])
    async with engine.begin() as conn:
        got = await store.claim(conn, family, "q", 1, 10)
        assert got
        dead = Outcome(DEAD, TERMINAL, "refused")
        await store.finish(conn, family, 1, got[0].token, [(c, dead) for c in got])
        parked = [c.id for c in got]
    async with engine.begin() as conn:
        await operate.list_parked(conn, tables, org_id="org1")
        await operate.replay(conn, tables, parked, org_id="org1")
    async with engine.begin() as conn:
        got = await store.claim(conn, family, "q", 1, 10)
        assert got
        held = {c.id: "T" for c in got if c.target_key}
        await store.release(conn, family, got[0].token, [c.id for c in got], target_keys=held)
    async with engine.begin() as conn:
        await conn.execute(tables.items.update().values(lease_until=0, run_after=0))
        await store.reclaim_expired(conn, family, "q")
    async with engine.begin() as conn:
        got = await store.claim(conn, family, "q", 1, 10)
        await store.finish(
            conn, family, 1, got[0].token, [(c, Outcome(DEAD, TERMINAL, "x")) for c in got]
        )
        for c in got:
            if c.lane_key:
                await operate.skip_head(conn, tables, c.id, org_id="org1")
    await transfer(engine, tables, family, "b", timeout_s=5, poll_s=0.05)


async def receipts(engine: AsyncEngine) -> None:
    now = int(time.time() * 1000)
    row = ReceiptRow(
        org_id="00D000000000001AAA",
        receipt_id=f"{now:012x}{'0' * 20}",
        connector="c",
        route_key="r",
        route_version=1,
        provider_delivery_id="d-1",
        delivery_id_source="header",
        method="POST",
        content_type="application/json",
        event_kind=None,
        correlation={},
        body_bytes=2,
        body_snapshot=b"{}",
        body_ref=None,
        payload_sha256="0" * 64,
        signature_scheme="hmac",
        signature_key_index=0,
    )
    again = ReceiptRow(**{**row.__dict__, "receipt_id": f"{now:012x}{'1' * 20}"})
    async with engine.begin() as conn:
        await conn.run_sync(store_receipts, [row])
        await conn.run_sync(store_receipts, [again])  # the redelivery path


def source_files() -> dict[str, str]:
    """Every module of the product, by path (raw SQL, dialect kwargs, hand-written DDL)."""
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for path in sorted((ROOT / "nexus").rglob("*.py"))
    }


async def test_no_sql_feature_nexus_emits_is_one_tidb_lacks(captured: Captured) -> None:
    assert len(captured.statements) > 200  # migrations of four services and the cycles ran
    problems: list[str] = []
    seen: dict[str, int] = {}
    sources = source_files()
    for difference in DIFFERENCES:
        emitted = [s for s in captured.statements if difference.emitted.search(s)]
        written = [
            name
            for name, text in sources.items()
            if difference.written.search(text)
            and not any(name.startswith(g) for g in difference.guarded_in)
        ]
        seen[difference.name] = len(emitted)
        if emitted and not difference.guarded_in:
            problems.append(f"{difference.name}: {difference.tidb}; sent: {emitted[0][:160]}")
        if written:
            where = "outside the modules that branch on TiDB" if difference.guarded_in else ""
            problems.append(f"{difference.name} {where}: {difference.tidb}; in {written}")
    supported = {
        name: sum(1 for s in captured.statements if re.search(p, s, re.IGNORECASE | re.M))
        for name, p in SUPPORTED
    }
    print("TiDB differences emitted:", seen)
    print("supported features emitted:", supported)
    assert not problems, "\n".join(problems)


async def test_the_guarded_features_take_tidbs_path() -> None:
    """FULLTEXT: the search migration skips the index and the search engine uses LIKE on a
    server whose version says TiDB; the MariaDB session variable is set only on MariaDB;
    the reclaim sweep's SKIP LOCKED is not sent to TiDB."""

    class Dialect:
        name = "mysql"
        server_version_info = (8, 0, 11, "TiDB", "v7.5.1")

    class Bind:
        dialect = Dialect()

    class Session:
        def get_bind(self) -> Bind:
            return Bind()

    assert not skips_locked(Session())  # the reclaim sweep waits there, as a CAS it is safe
    assert choose_mode(Session(), [Token("acme", prefix=False)]) == "like"  # type: ignore[arg-type]
    assert choose_mode(Session(), [Token("acme", prefix=False)]) != "fulltext"  # type: ignore[arg-type]
    migration = (ROOT / "nexus/migrations/runtime/versions/runtime_0005_search.py").read_text()
    assert 'if "tidb" not in version.lower():' in migration
    engine_source = (ROOT / "nexus/platform/db/engine.py").read_text()
    assert 'if "mariadb" not in str(cursor.fetchone()[0]).lower():\n                return' in (
        engine_source
    )
