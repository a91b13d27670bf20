"""The executor's AcceptCommand call and how it classifies answers, against a Runtime stand-in
served over real HTTP (`tests/support/runtime_stand_in.py`; the contract is
`nexus.contracts.commands`): concurrent calls share batch requests, and each command still
gets its own outcome."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from joserfc import jwt
from joserfc.jwk import ECKey

from nexus.contracts.commands import AcceptCommandRequest, RecordCommand
from nexus.integration.delivery.executor import CommandExecutor
from nexus.platform.breaker import BreakerSettings
from nexus.platform.http_client import internal_client
from nexus.platform.workload import DEADLINE_HEADER, WORKLOAD_HEADER, WorkloadSigner
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Deferred, Retryable, Terminal, WorkFailed
from tests.support.runtime_stand_in import StandIn
from tests.support.servers import closed_port_url, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "00D000000000001AAA"
KEY = ECKey.generate_key("P-256", private=True)
TIMEOUT = 0.5


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runtime() -> AsyncIterator[StandIn]:
    stand_in = StandIn(slow_seconds=TIMEOUT * 3)
    async with serving(stand_in.app()) as url:
        stand_in.url = url
        yield stand_in


def item(external_id: str, *, work_id: str | None = None, org: str = ORG) -> Claimed:
    work_id = work_id or f"work-{external_id}"
    request = AcceptCommandRequest(
        org_id=org,
        message_id=work_id,
        command=RecordCommand(
            op="upsert",
            object="Contact",
            external_id_field="External_Id__c",
            external_id=external_id,
            fields={"External_Id__c": external_id, "LastName": "Ada"},
        ),
        correlation={"event_id": "e-1", "receipt_id": "r-1", "delivery_id": "d-1"},
    )
    return Claimed(
        id=work_id,
        family="routes:demo",
        queue_class="contacts",
        token="t" * 32,
        epoch=1,
        attempt=1,
        max_attempts=5,
        payload=request.model_dump_json(),
        lane_key=None,
        lane_seq=None,
        target_key=None,
    )


async def outcome(executor: CommandExecutor, claimed: Claimed) -> Exception | None:
    try:
        await executor(claimed)
    except WorkFailed as exc:
        return exc
    return None


async def call_all(
    url: str, items: list[Claimed], seconds: float = TIMEOUT, **options: Any
) -> list[Exception | None]:
    """Hand `items` to one executor at once (as the Worker does with a claimed batch)."""
    async with internal_client(base_url=url, timeout_seconds=seconds, connections=4) as client:
        executor = CommandExecutor(
            client, WorkloadSigner("integration", KEY), timeout_seconds=seconds, **options
        )
        try:
            return list(await asyncio.gather(*(outcome(executor, c) for c in items)))
        finally:
            await executor.aclose()


async def call(url: str, claimed: Claimed) -> Exception | None:
    (result,) = await call_all(url, [claimed])
    return result


async def test_202_is_success_and_a_repeat_is_a_duplicate_success(runtime: StandIn) -> None:
    assert await call(runtime.url, item("ok-1")) is None
    assert await call(runtime.url, item("ok-1")) is None  # Runtime dedupes on the message id
    first, again = runtime.calls[-2:]
    assert first["body"] == again["body"]
    assert first["body"]["message_id"] == "work-ok-1"
    assert first["body"]["correlation"] == {
        "event_id": "e-1",
        "receipt_id": "r-1",
        "delivery_id": "d-1",
    }


async def test_each_call_carries_a_fresh_workload_token_and_a_deadline(runtime: StandIn) -> None:
    before = int(time.time() * 1000)
    await call(runtime.url, item("ok-2"))
    await call(runtime.url, item("ok-3"))
    tokens = [c["headers"][WORKLOAD_HEADER] for c in runtime.calls[-2:]]
    assert tokens[0] != tokens[1]
    public = ECKey.import_key(KEY.as_pem(private=False))
    claims = jwt.decode(tokens[0], public, algorithms=["ES256"]).claims
    assert (claims["iss"], claims["aud"]) == ("integration", "runtime-api")
    deadline = int(runtime.calls[-1]["headers"][DEADLINE_HEADER])
    assert before + TIMEOUT * 1000 <= deadline <= int(time.time() * 1000) + TIMEOUT * 1000


@pytest.mark.parametrize(
    ("external_id", "kind", "message", "delay_ms"),
    [
        ("bad-1", Terminal, "Runtime answered 400 VALIDATION_ERROR", None),
        ("conflict-1", Terminal, "Runtime answered 409 IDEMPOTENCY_CONFLICT", None),
        ("busy-1", Deferred, "Runtime answered 503 UNAVAILABLE; nothing taken", 7000),
        ("flagged-1", Retryable, "Runtime answered 400 STALE_METADATA", None),  # body decides
        ("expired-1", Retryable, "Runtime answered 401 UNAUTHENTICATED", None),
        ("html-1", Retryable, "Runtime answered 502", None),
    ],
)
async def test_error_answers_are_classified_by_the_contract(
    runtime: StandIn, external_id: str, kind: type[Exception], message: str, delay_ms: int | None
) -> None:
    failure = await call(runtime.url, item(external_id))
    assert isinstance(failure, kind)
    assert str(failure) == message  # status and code only: never Runtime's message text
    assert getattr(failure, "delay_ms", None) == delay_ms


async def test_a_timeout_after_sending_is_retried_under_the_same_message_id(
    runtime: StandIn,
) -> None:
    failure = await call(runtime.url, item("slow-1"))
    assert isinstance(failure, Retryable)
    assert str(failure) == (
        "no answer from Runtime within 0.5s (SocketTimeoutError); "
        "sent again under the same message id"
    )
    assert runtime.calls[-1]["body"]["message_id"] == "work-slow-1"  # it did arrive


async def test_an_unreachable_runtime_defers_the_command_without_spending_an_attempt() -> None:
    failure = await call(closed_port_url(), item("ok-9"))
    assert isinstance(failure, Deferred)
    assert str(failure) == "Runtime unreachable (ConnectionRefusedError); nothing sent"


async def test_the_breaker_opens_sends_nothing_while_open_and_a_probe_closes_it(
    runtime: StandIn,
) -> None:
    """Two 503s in a row open it: the next command is deferred until the open time without a
    request; after it one probe goes, is answered, and the breaker is closed again."""
    async with internal_client(base_url=runtime.url, timeout_seconds=5, connections=4) as client:
        executor = CommandExecutor(
            client,
            WorkloadSigner("integration", KEY),
            timeout_seconds=5,
            breaker=BreakerSettings(failures=2, open_ms=400, open_cap_ms=400),
        )
        try:
            requests = len(runtime.requests)
            first = [await outcome(executor, item(f"busy-open-{n}")) for n in range(2)]
            assert [type(o) for o in first] == [Deferred, Deferred]
            assert executor.breaker.state == "open"
            assert 0 < executor.breaker.retry_in() <= 0.4
            held = await outcome(executor, item("ok-held-1"))
            assert isinstance(held, Deferred)
            assert str(held) == "Runtime unavailable (circuit open); nothing sent"
            assert 0 < (held.delay_ms or 0) <= 400
            assert len(runtime.requests) == requests + 2  # the held one sent nothing
            assert "work-ok-held-1" not in runtime.accepted
            await asyncio.sleep(0.45)
            assert executor.breaker.retry_in() == 0  # a probe may go
            assert await outcome(executor, item("ok-probe-1")) is None
            assert executor.breaker.state == "closed"
            assert len(runtime.requests) == requests + 3
        finally:
            await executor.aclose()


async def test_a_corrupt_work_item_is_terminal_and_sends_nothing(runtime: StandIn) -> None:
    calls = len(runtime.calls)
    broken = await call(runtime.url, dataclasses.replace(item("ok-5"), payload="{"))
    assert isinstance(broken, Terminal)
    assert str(broken) == "the work item does not hold a valid command"
    mismatched = await call(runtime.url, dataclasses.replace(item("ok-6"), id="w-7"))
    assert isinstance(mismatched, Terminal)
    assert str(mismatched) == "the work item's command carries another message id"
    assert len(runtime.calls) == calls


async def test_concurrent_items_share_few_requests_each_with_its_own_outcome(
    runtime: StandIn,
) -> None:
    requests = len(runtime.requests)
    items = [item(f"ok-batch-{n}") for n in range(200)]
    items[17] = item("bad-batch-17")
    items[42] = item("conflict-batch-42")
    items[99] = item("flagged-batch-99")
    outcomes = await call_all(runtime.url, items, seconds=10, max_commands=64)
    sent = runtime.requests[requests:]
    assert len(sent) <= 6, sent  # 200 commands, at most 64 per request
    assert sum(r["commands"] for r in sent) == 200
    assert max(r["commands"] for r in sent) == 64
    assert {r["path"] for r in sent} == {"/internal/v1/runtime/commands/batch"}
    failed = {n: (type(o), str(o)) for n, o in enumerate(outcomes) if o is not None}
    assert failed == {
        17: (Terminal, "Runtime answered 400 VALIDATION_ERROR"),
        42: (Terminal, "Runtime answered 409 IDEMPOTENCY_CONFLICT"),
        99: (Retryable, "Runtime answered 400 STALE_METADATA"),
    }
    assert {f"work-ok-batch-{n}" for n in range(200)} - {
        f"work-ok-batch-{n}" for n in (17, 42, 99)
    } <= set(runtime.accepted)


async def test_a_whole_request_failure_fails_every_command_in_it_alike(
    runtime: StandIn,
) -> None:
    requests = len(runtime.requests)
    outcomes = await call_all(
        runtime.url, [item("ok-b-1"), item("busy-b-2"), item("ok-b-3")], seconds=10
    )
    assert len(runtime.requests) == requests + 1  # one request carried all three
    assert [(type(o), str(o), getattr(o, "delay_ms", None)) for o in outcomes] == [
        (Deferred, "Runtime answered 503 UNAVAILABLE; nothing taken", 7000)
    ] * 3
    assert "work-ok-b-1" not in runtime.accepted  # Runtime took none of them


async def test_each_batch_holds_one_orgs_commands_and_its_token_is_signed_for_that_org(
    runtime: StandIn,
) -> None:
    other = "00D000000000002BBB"
    requests = len(runtime.requests)
    items = [item(f"ok-org-{n}", org=ORG if n % 2 else other) for n in range(6)]
    assert await call_all(runtime.url, items, seconds=10) == [None] * 6
    assert len(runtime.requests) == requests + 2  # one per org
    public = ECKey.import_key(KEY.as_pem(private=False))
    signed = {}
    for call in runtime.calls[-6:]:
        token = call["headers"][WORKLOAD_HEADER]
        claims = jwt.decode(token, public, algorithms=["ES256"]).claims
        signed.setdefault(claims["org"], set()).add(call["body"]["org_id"])
    assert signed == {ORG: {ORG}, other: {other}}


async def test_a_batch_bounded_by_bytes_is_split(runtime: StandIn) -> None:
    requests = len(runtime.requests)
    items = [item(f"ok-bytes-{n}") for n in range(10)]
    size = len(items[0].payload)
    outcomes = await call_all(runtime.url, items, seconds=10, max_bytes=3 * size + 40)
    assert outcomes == [None] * 10
    assert [r["commands"] for r in runtime.requests[requests:]] == [3, 3, 3, 1]


async def test_closing_fails_what_was_not_sent_as_retryable(runtime: StandIn) -> None:
    requests = len(runtime.requests)
    async with internal_client(base_url=runtime.url, timeout_seconds=5, connections=4) as client:
        executor = CommandExecutor(
            client, WorkloadSigner("integration", KEY), timeout_seconds=5, window_seconds=30
        )
        calls = [asyncio.create_task(outcome(executor, item(f"ok-close-{n}"))) for n in range(3)]
        await asyncio.sleep(0.05)  # queued, the sender waiting out its (long) window
        await executor.aclose()
        results = await asyncio.gather(*calls)
    assert [(type(r), str(r)) for r in results] == [
        (Retryable, "the executor stopped before sending the command")
    ] * 3
    assert len(runtime.requests) == requests  # nothing was sent
