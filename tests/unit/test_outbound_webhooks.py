"""Outbound webhook sends against an in-memory transport: signature and classification."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import httpx
import pytest

from nexus.integration.ingress.signatures import StandardWebhooksScheme, WebhookRequest, verify
from nexus.platform.standard_webhooks import derive_key
from nexus.platform.workqueue.worker import Retryable, Terminal
from nexus.runtime.outbox.delivery import send

pytestmark = pytest.mark.asyncio
SECRET = "whsec_" + base64.b64encode(b"outbound-test-key-32-bytes-long!").decode()
URL = "https://user:pw@receiver.test/hooks?token=abc"


async def post(
    answer: Callable[[httpx.Request], httpx.Response], seen: list[httpx.Request] | None = None
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return answer(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        await send(
            http,
            name="crm",
            url=URL,
            key=derive_key(SECRET),
            msg_id="0190abc",
            body=b'{"type":"a.b","data":{}}',
            max_delay_ms=60_000,
        )


async def test_a_delivery_verifies_with_the_inbound_standard_webhooks_scheme() -> None:
    seen: list[httpx.Request] = []
    await post(lambda _r: httpx.Response(204), seen)
    [request] = seen
    assert request.headers["webhook-id"] == "0190abc"
    assert request.headers["content-type"] == "application/json"
    verdict = verify(
        StandardWebhooksScheme(),
        [SECRET],
        WebhookRequest(
            method="POST",
            url=str(request.url),
            headers=dict(request.headers),
            body=request.content,
            received_at_seconds=float(request.headers["webhook-timestamp"]),
        ),
    )
    assert verdict.ok, verdict
    assert json.loads(request.content) == {"type": "a.b", "data": {}}


@pytest.mark.parametrize(
    ("status", "headers", "kind", "delay"),
    [
        (200, {}, None, None),
        (429, {"retry-after": "7"}, Retryable, 7_000),
        (503, {"retry-after": "86400"}, Retryable, 60_000),  # capped
        (500, {}, Retryable, None),
        (408, {}, Retryable, None),
        (400, {}, Terminal, None),
        (410, {}, Terminal, None),
        (301, {"location": "https://elsewhere.test/"}, Terminal, None),  # never followed
    ],
)
async def test_statuses_are_classified(
    status: int, headers: dict[str, str], kind: type[Exception] | None, delay: int | None
) -> None:
    answer = httpx.Response(status, headers=headers)
    if kind is None:
        await post(lambda _r: answer)
        return
    with pytest.raises(kind) as caught:
        await post(lambda _r: answer)
    assert str(caught.value) == f"endpoint 'crm' answered HTTP {status}"
    assert getattr(caught.value, "delay_ms", None) == delay


@pytest.mark.parametrize(
    "failure",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("x")],
)
async def test_transport_failures_retry_and_name_no_url(failure: Exception) -> None:
    def fail(_request: httpx.Request) -> httpx.Response:
        raise failure

    with pytest.raises(Retryable) as caught:
        await post(fail)
    assert str(caught.value) == f"endpoint 'crm': {type(failure).__name__}"
    assert "receiver.test" not in str(caught.value)
