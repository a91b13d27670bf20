"""A runtime-worker frozen inside a write transaction stalls nobody (issue 25, point 1), on
both backends, with real processes: runtime-api and two runtime-workers (`nexus serve`).

The first worker freezes itself (SIGSTOP, failpoint `inbox.freeze_in_group`) after its first
group of commands wrote its changes and completions, before the commit: the worst moment, it
holds the write transaction. For `FREEZE_SECONDS` commands keep arriving; each accept is a
Runtime write (the inbox row) and must stay fast (p99 < 1 s), and the other worker keeps
applying them. On SQLite the frozen holder of the file's write turn is killed by the first
writer that waits for it (`platform/db/sqlite/fencing.py`); its group rolled back and is run
by the other worker once its lease is out. On MariaDB it holds only its own rows: it stays
stopped, is continued at the end and commits what it held. Either way every command is
applied once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import select

from nexus.platform.db.engine import reading
from nexus.platform.secrets import ensure_local_secrets
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.execute import FAILPOINT_FREEZE_IN_GROUP
from tests.conftest import Backend
from tests.e2e.test_pipeline_reliability import (
    Role,
    contact_versions,
    inbox_states,
    role_env,
    until,
)
from tests.support.commands import (
    RuntimeDb,
    command,
    free_port,
    prepare_runtime,
    process_state,
    send,
)

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

#: How long the worker stays frozen (the issue's probe: 40 s).
FREEZE_SECONDS = float(os.environ.get("NEXUS_E2E_FREEZE_SECONDS", "40"))
#: Commands sent per second while it is frozen.
RATE = 10
INBOX_LEASE_MS = 2000


@dataclass
class FrozenStack:
    backend: Backend
    runtime: RuntimeDb
    api: Role
    frozen: Role
    steady: Role


def state(role: Role) -> str:
    assert role.process is not None
    return process_state(role.process.pid)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[FrozenStack]:
    tmp = tmp_path_factory.mktemp("frozen-worker")
    runtime = await prepare_runtime(backend, tmp / "var")
    ensure_local_secrets(tmp / "var", ["runtime-api", "runtime-worker", "integration"])
    api_port = free_port()
    env = role_env(tmp, backend, api_port, runtime.org_id)
    env["NEXUS_INBOX_LEASE_MS"] = str(INBOX_LEASE_MS)
    result = FrozenStack(
        backend,
        runtime,
        Role("runtime-api", api_port, env, tmp / "runtime-api.log"),
        Role(
            "runtime-worker",
            free_port(),
            {**env, "NEXUS_FAILPOINT": FAILPOINT_FREEZE_IN_GROUP},
            tmp / "frozen-worker.log",
        ),
        Role("runtime-worker", free_port(), env, tmp / "steady-worker.log"),
    )
    roles = (result.api, result.frozen, result.steady)
    try:
        for role in roles:
            await role.start()
        yield result
    finally:
        for role in roles:
            if role.process is not None and role.process.poll() is None:
                role.process.send_signal(signal.SIGCONT)
                role.process.kill()
                role.process.wait()
        await runtime.engine.dispose()


async def finished(runtime: RuntimeDb, work_ids: list[str]) -> dict[str, str]:
    items = inbox_tables.inbox.items
    async with reading(runtime.engine) as conn:
        rows = await conn.execute(select(items.c.id, items.c.state).where(items.c.id.in_(work_ids)))
        return {r[0]: r[1] for r in rows}


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)]


async def test_a_worker_frozen_mid_transaction_stalls_no_runtime_write(
    stack: FrozenStack,
) -> None:
    runtime = stack.runtime
    sent: dict[str, float] = {}  # work id -> when its accept was answered
    applied: dict[str, float] = {}  # work id -> when it was first seen succeeded
    accept_s: list[float] = []
    refused: list[int] = []
    async with httpx.AsyncClient(base_url=stack.api.url, timeout=30) as client:

        async def accept(external_id: str) -> None:
            started = time.monotonic()
            reply = await send(client, runtime, command(external_id, LastName=external_id))
            accept_s.append(time.monotonic() - started)
            if reply.status_code != 202:
                refused.append(reply.status_code)
                return
            sent[reply.json()["work_id"]] = time.monotonic()

        n = 0
        # until the frozen worker's first group stops it (on SQLite the accept that meets
        # the stopped holder may already have killed it by the time it returns)
        async with asyncio.timeout(30):
            while state(stack.frozen) not in ("T", "Z", "gone"):
                await accept(f"frozen-{n}")
                n += 1
                await asyncio.sleep(0.1)
        held = list(sent)  # before the freeze: one of them is in the frozen transaction
        # (accept_s keeps the accepts that found the holder stopped: on SQLite one of them
        # waited out the fencing bound)
        stop_at = time.monotonic() + FREEZE_SECONDS

        async def sender() -> None:
            nonlocal n
            while time.monotonic() < stop_at:
                await accept(f"frozen-{n}")
                n += 1
                await asyncio.sleep(1 / RATE)

        async def watcher() -> None:
            while time.monotonic() < stop_at + 1:
                waiting = [w for w in sent if w not in applied]
                if waiting:
                    for work_id, item_state in (await finished(runtime, waiting)).items():
                        if item_state == "succeeded":
                            applied[work_id] = time.monotonic()
                await asyncio.sleep(0.1)

        await asyncio.gather(sender(), watcher())

    frozen_state = state(stack.frozen)
    during = [w for w in sent if w not in held]
    apply_s = [applied[w] - sent[w] for w in during if w in applied]
    print(
        f"frozen worker ({stack.backend.name}): {len(during)} accepts in {FREEZE_SECONDS:g} s, "
        f"accept p99 {p99(accept_s) * 1000:.0f} ms max {max(accept_s) * 1000:.0f} ms; "
        f"applied meanwhile {len(apply_s)}, apply p99 {p99(apply_s) * 1000:.0f} ms; "
        f"frozen worker {frozen_state}"
    )
    assert not refused
    assert p99(accept_s) < 1.0
    assert len(apply_s) >= len(during) - RATE, "the steady worker stopped applying"
    assert p99(apply_s) < 1.0
    if stack.backend.name == "sqlite":  # fenced: killed, its transaction gone
        assert stack.frozen.process is not None
        assert stack.frozen.process.poll() == -signal.SIGKILL, stack.frozen.tail()
        logs = stack.api.log.read_text() + stack.steady.log.read_text()
        assert logs.count('"sqlite.writer_fenced"') == 1
    else:  # it held its own rows only: continued, it finds its lease lost or commits
        assert frozen_state == "T"
        assert stack.frozen.process is not None
        stack.frozen.process.send_signal(signal.SIGCONT)

    async def all_applied() -> bool:
        return set((await finished(runtime, list(sent))).values()) == {"succeeded"}

    await until(all_applied, 60, "every command was applied")
    versions = await contact_versions(runtime, "frozen-")
    assert len(versions) == len(sent)
    assert set(versions.values()) == {1}  # each applied once
    states = await inbox_states(runtime)
    assert states == {"succeeded": len(sent)}, states
