"""A real worker process for the work engine's crash and reliability tests.

    python -m tests.support.work_worker URL PREFIX OWNER LEASE_MS SLEEP_MS [options]

Runs a `Worker` whose handler sleeps SLEEP_MS then records its effect idempotently (one row
per item id in `<prefix>_effect`, and one row per execution in `<prefix>_execution`). Stops on
SIGTERM (drain) and prints its stats as JSON.

An item's payload may steer its handler: a JSON object with `sleep_ms` (instead of SLEEP_MS)
and `fail_attempts` (raise `Retryable` while the attempt is at most that).

Options:
    --complete-in     the effect is a row in `<prefix>_effect_log` written in the same
                      transaction as the item's completion (`Worker.complete_in`), so an
                      effect commits only with its own completion
    --record FILE     append one JSON line per execution: item, token, pid, attempt, lane,
                      target, start/end (CLOCK_MONOTONIC ns: one clock for every process on
                      the host) and how the handler ended
    --concurrency, --batch, --idle-poll-ms, --flush-ms    WorkerSettings

`NEXUS_TEST_CLOCK_SKEW_S` shifts this process's wall clock (`time.time`, `time.time_ns`) by
that many seconds, as if its host clock were wrong: leases must not care.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, insert

from nexus.platform.db.backend import insert_ignore
from nexus.platform.db.engine import create_engine
from nexus.platform.observability import configure_logging
from nexus.platform.workqueue.store import Claimed, WorkStore
from nexus.platform.workqueue.tables import work_tables
from nexus.platform.workqueue.worker import Retryable, Worker, WorkerSettings

SKEW_ENV = "NEXUS_TEST_CLOCK_SKEW_S"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    process: subprocess.Popen[str]
    stderr: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 30) -> dict[str, Any]:
        """SIGTERM (drain), then its stats."""
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=timeout)
        report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return report

    def warnings(self) -> list[str]:
        """The events this process logged at warning level or above."""
        lines = self.stderr.read_text().splitlines() if self.stderr.exists() else []
        return [json.loads(line).get("event", line) for line in lines if line.startswith("{")]


def spawn(
    url: str,
    prefix: str,
    owner: str,
    lease_ms: int,
    sleep_ms: int,
    *options: str,
    stderr: Path | None = None,
    skew_s: float = 0,
    ready: bool = True,
) -> WorkerProcess:
    """Start a worker process (from the repository root); waits until it says it is ready
    unless `ready=False` (then call `wait_ready`), so several can start at once."""
    log = stderr or Path(os.devnull)
    with log.open("a") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.work_worker",
                url,
                prefix,
                owner,
                str(lease_ms),
                str(sleep_ms),
                *options,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), SKEW_ENV: str(skew_s)},
        )
    worker = WorkerProcess(process, log)
    if ready:
        wait_ready(worker)
    return worker


def wait_ready(worker: WorkerProcess) -> None:
    assert worker.process.stdout is not None
    assert worker.process.stdout.readline().strip() == "ready"


def effect_tables(metadata: MetaData, prefix: str) -> tuple[Table, Table]:
    effect = Table(f"{prefix}_effect", metadata, Column("item_id", String(36), primary_key=True))
    execution = Table(
        f"{prefix}_execution",
        metadata,
        Column("n", Integer, primary_key=True, autoincrement=True),
        Column("item_id", String(36), nullable=False),
        Column("token", String(32), nullable=False),
        Column("pid", Integer, nullable=False),
    )
    return effect, execution


def effect_log_table(metadata: MetaData, prefix: str) -> Table:
    """Effects written with their completion: one row per committed effect (no key)."""
    return Table(
        f"{prefix}_effect_log",
        metadata,
        Column("n", Integer, primary_key=True, autoincrement=True),
        Column("item_id", String(36), nullable=False),
        Column("token", String(32), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("at_ns", BigInteger, nullable=False),
    )


def skew_wall_clock() -> None:
    seconds = float(os.environ.get(SKEW_ENV) or 0)
    if not seconds:
        return
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + int(seconds * 1e9)


def instructions(payload: str) -> dict[str, Any]:
    try:
        parsed = json.loads(payload)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


async def main(args: argparse.Namespace) -> None:
    engine = create_engine(args.url, application_name="work-worker")
    metadata = MetaData()
    store = WorkStore(work_tables(metadata, args.prefix), owner=args.owner, lease_ms=args.lease_ms)
    effect, execution = effect_tables(metadata, args.prefix)
    effect_log = effect_log_table(metadata, args.prefix)
    record: IO[str] | None = open(args.record, "a", buffering=1) if args.record else None  # noqa: SIM115, ASYNC230 - line-buffered for the whole run
    worker: Worker

    def note(item: Claimed, start: int, end: int | None, ended: str) -> None:
        if record is None:
            return
        line = {
            "id": item.id,
            "token": item.token,
            "pid": os.getpid(),
            "attempt": item.attempt,
            "lane": item.lane_key,
            "seq": item.lane_seq,
            "target": item.target_key,
            "start": start,
            "end": end or time.monotonic_ns(),
            "ended": ended,
        }
        record.write(json.dumps(line) + "\n")

    async def handler(item: Claimed) -> None:
        start = time.monotonic_ns()
        end: int | None = None  # before the completion commits: the next holder may then start
        ended = "cancelled"
        try:
            steer = instructions(item.payload)
            if not args.complete_in:
                async with engine.begin() as conn:
                    await conn.execute(
                        insert(execution).values(item_id=item.id, token=item.token, pid=os.getpid())
                    )
            await asyncio.sleep(steer.get("sleep_ms", args.sleep_ms) / 1000)
            if item.attempt <= steer.get("fail_attempts", 0):
                ended, end = "retry", time.monotonic_ns()
                raise Retryable("asked to fail this attempt", delay_ms=0)
            if args.complete_in:
                async with engine.begin() as conn:
                    await conn.execute(
                        insert(effect_log).values(
                            item_id=item.id,
                            token=item.token,
                            pid=os.getpid(),
                            at_ns=time.monotonic_ns(),
                        )
                    )
                    await worker.complete_in(conn, item)
                    end = time.monotonic_ns()
            else:
                async with engine.begin() as conn:  # an idempotent effect, keyed by the work id
                    await conn.execute(
                        insert_ignore(effect, conn.dialect.name).values(item_id=item.id)
                    )
                end = time.monotonic_ns()
            ended = "ok"
        except Exception as exc:
            if ended != "retry":
                ended = type(exc).__name__
            raise
        finally:
            note(item, start, end, ended)

    worker = Worker(
        engine,
        store,
        handler,
        WorkerSettings(
            concurrency=args.concurrency,
            batch=args.batch,
            idle_poll_ms=args.idle_poll_ms,
            queue_refresh_ms=200,
            flush_ms=args.flush_ms,
        ),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    print("ready", flush=True)
    await worker.run()
    print(json.dumps({"succeeded": worker.stats.succeeded, "lost": worker.stats.lost}), flush=True)
    if record is not None:
        record.close()
    await engine.dispose()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("owner")
    parser.add_argument("lease_ms", type=int)
    parser.add_argument("sleep_ms", type=int)
    parser.add_argument("--complete-in", action="store_true")
    parser.add_argument("--record")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--idle-poll-ms", type=int, default=50)
    parser.add_argument("--flush-ms", type=float, default=5.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    skew_wall_clock()
    configure_logging(role="work-worker", level="warning", fmt="json")
    asyncio.run(main(parse()))
