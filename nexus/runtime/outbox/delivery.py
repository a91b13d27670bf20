"""Outbound webhooks: one signed POST per outbox item, classified for the work engine.

    2xx                                  delivered (the item succeeds)
    408, 429, 5xx, timeout, connection   retry with backoff (429/503 `Retry-After` honoured,
                                         up to the backoff cap); dead after max attempts
    any other status (3xx, 4xx)          dead at once: the receiver refused it
    endpoint missing/disabled, secret    dead at once: an operator must fix the binding, then
    not provisioned                      replay

The message id (`webhook-id`) is the work id, the same on every retry, so a receiver dedupes
redeliveries. The body is the JSON built when the record was saved. Nothing here logs or
stores the URL, a header value, the secret or the body: errors name the endpoint and the
status or exception class only. The response body is never read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus import __version__
from nexus.platform.db.engine import reading
from nexus.platform.observability import get_logger
from nexus.platform.secrets import WebhookSecretMissing, read_webhook_secret
from nexus.platform.standard_webhooks import derive_key, signature_headers
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Retryable, Terminal
from nexus.runtime.outbox.bindings import find_endpoint
from nexus.runtime.outbox.queue import OutboxMessage

log = get_logger(__name__)


@dataclass(frozen=True)
class Delivery:
    engine: AsyncEngine
    http: httpx.AsyncClient
    var_dir: Path
    max_delay_ms: int

    async def __call__(self, message: OutboxMessage, claimed: Claimed) -> None:
        name = message.endpoint or ""
        async with reading(self.engine) as conn:
            endpoint = await find_endpoint(conn, org_id=message.org_id, name=name)
        if endpoint is None or not endpoint.active:
            raise Terminal(f"no active outbound endpoint {name!r}")
        try:
            key = derive_key(read_webhook_secret(self.var_dir, endpoint.secret_ref))
        except (WebhookSecretMissing, ValueError):
            raise Terminal(
                f"endpoint {name!r}: secret {endpoint.secret_ref!r} is not provisioned or usable"
            ) from None
        body = json.dumps(message.body, separators=(",", ":"), ensure_ascii=False).encode()
        await send(
            self.http,
            name=name,
            url=endpoint.url,
            key=key,
            msg_id=claimed.id,
            body=body,
            max_delay_ms=self.max_delay_ms,
        )


async def send(
    http: httpx.AsyncClient,
    *,
    name: str,
    url: str,
    key: bytes,
    msg_id: str,
    body: bytes,
    max_delay_ms: int,
) -> None:
    """POST `body` signed as message `msg_id`; returns on 2xx, raises Retryable / Terminal."""
    headers = {
        "content-type": "application/json",
        "user-agent": f"nexus-webhooks/{__version__}",
        **signature_headers(key, msg_id=msg_id, timestamp=int(time.time()), body=body),
    }
    try:
        async with http.stream("POST", url, content=body, headers=headers) as response:
            status, retry_after = response.status_code, response.headers.get("retry-after")
    except httpx.HTTPError as exc:  # timeouts, refused connections, TLS, protocol errors
        raise Retryable(f"endpoint {name!r}: {type(exc).__name__}") from None
    log.info("outbox.webhook_answered", endpoint=name, work_id=msg_id, status=status)
    if 200 <= status < 300:
        return
    error = f"endpoint {name!r} answered HTTP {status}"
    if status in (408, 429) or status >= 500:
        raise Retryable(error, delay_ms=_retry_after_ms(retry_after, max_delay_ms))
    raise Terminal(error)


def _retry_after_ms(value: str | None, cap_ms: int) -> int | None:
    """`Retry-After` in seconds (the date form is ignored), capped; None: the backoff."""
    if value is None or not value.strip().isdigit():
        return None
    return min(int(value.strip()) * 1000, cap_ms)
