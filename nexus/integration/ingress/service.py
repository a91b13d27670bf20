"""Webhook ingress: route -> size -> signature -> delivery id -> durable receipt -> ack.

Nothing is stored before the signature verifies, and nothing is acknowledged before the
receipt's transaction commits (`ReceiptWriter`). Rejections are logged by reason code only:
never the body, a header value, a signature or a secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.errors import NexusError, NotFound, ServiceUnavailable
from nexus.integration.ingress.bodies import keep_body
from nexus.integration.ingress.errors import SignatureRejected, WebhookTooLarge
from nexus.integration.ingress.repository import ReceiptRow, Stored
from nexus.integration.ingress.signatures import AnyScheme, WebhookRequest, derive_keys, verify_keys
from nexus.integration.ingress.writer import ReceiptWriter
from nexus.integration.routing.mapping import LANE_KEY_BYTES, SOURCE_ID, SOURCE_KIND
from nexus.integration.routing.repository import RouteRepository
from nexus.integration.routing.routes import ActiveRoute, Extract, resolve_pointer
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.ids import fit
from nexus.platform.observability import get_logger
from nexus.platform.secrets import (
    WEBHOOK_SECRET_REF,
    WebhookSecretMissing,
    read_webhook_secret,
    webhook_secret_dir,
)

log = get_logger(__name__)

RECEIPTS = Counter(
    "nexus_ingress_receipts_total",
    "Webhook deliveries durably received, by connector and outcome (accepted|duplicate|"
    "digest_mismatch: a redelivery under a known delivery id with another body)",
    ["connector", "outcome"],
)
REJECTED = Counter(
    "nexus_ingress_rejected_total",
    "Webhook deliveries refused before a receipt, by reason code",
    ["connector", "reason"],
)

MAX_DELIVERY_ID = 191
MAX_EVENT_KIND = 128


def new_receipt_id() -> str:
    """32 hex characters: milliseconds since the epoch (12), then 80 random bits (20).

    Time-ordered, so new receipts append to the primary-key index (InnoDB clusters the
    table on it) instead of landing on random pages; still unguessable.
    """
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


#: Metric children remembered per counter; beyond this, `labels()` per call as before.
_CHILDREN_KEPT = 1024


def _counter_child(counter: Counter) -> Callable[[str, str], Any]:
    """`counter.labels(a, b)`, remembered: `labels` takes a lock and builds a key per call.
    The set is bounded (a delivery refused before its route is known is labelled with its
    path's connector)."""
    children: dict[tuple[str, str], Any] = {}

    def child(first: str, second: str) -> Any:
        key = (first, second)
        found = children.get(key)
        if found is None:
            found = counter.labels(first, second)
            if len(children) < _CHILDREN_KEPT:
                children[key] = found
        return found

    return child


_received = _counter_child(RECEIPTS)
_rejected = _counter_child(REJECTED)


@dataclass(frozen=True)
class Delivery:
    """What the HTTP edge hands over: the raw request, body still unread."""

    connector: str
    route: str
    method: str
    url: str  # the URL as the sender called it (public), for schemes that sign it
    headers: Mapping[str, str]
    body: AsyncIterator[bytes]
    request_id: str | None


@dataclass(frozen=True)
class KnownRoute:
    """An active route as the ingress uses it: its scheme parsed once, its secrets read and
    their MAC keys derived once (per refresh, not per delivery)."""

    route: ActiveRoute
    scheme: AnyScheme
    secrets: list[str]
    keys: list[bytes | None] = field(init=False, repr=False)
    needs_json: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", derive_keys(self.scheme, self.secrets))
        object.__setattr__(self, "needs_json", self.route.declaration.needs_json)


#: A secret file's identity: (inode, size, mtime ns, ctime ns). `write_webhook_secret`
#: replaces the file (a new inode), so a new or rotated secret always changes it.
_FileStamp = tuple[int, int, int, int]


class SecretFiles:
    """Webhook secret values, reread only when their file changed (`os.stat` per refresh
    instead of open + read), and `ingress.secret_missing` logged once per (route, secret
    reference) while it stays missing, again when it goes missing after being present."""

    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self._values: dict[str, tuple[_FileStamp, str]] = {}
        self._missing: set[tuple[str, str, str]] = set()

    def read(self, routes: list[ActiveRoute]) -> list[list[str]]:
        """Each route's usable secrets, in its declared order (blocking: run it on a thread)."""
        missing: set[tuple[str, str, str]] = set()
        values = []
        for found in routes:
            declaration = found.declaration
            usable = []
            for ref in declaration.secrets:
                value = self._value(ref)
                if value is None:
                    missing.add((declaration.connector, declaration.route, ref))
                else:
                    usable.append(value)
            values.append(usable)
        for connector, route, ref in sorted(missing - self._missing):
            log.warning("ingress.secret_missing", connector=connector, route=route, secret_ref=ref)
        self._missing = missing
        return values

    def _value(self, ref: str) -> str | None:
        if not WEBHOOK_SECRET_REF.fullmatch(ref):
            return None
        try:
            info = os.stat(webhook_secret_dir(self.var_dir) / ref)
        except FileNotFoundError:
            self._values.pop(ref, None)
            return None
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        known = self._values.get(ref)
        if known is not None and known[0] == stamp:
            return known[1]
        try:  # stamped before reading: a change while reading is seen on the next refresh
            value = read_webhook_secret(self.var_dir, ref)
        except (WebhookSecretMissing, ValueError):
            self._values.pop(ref, None)
            return None
        self._values[ref] = (stamp, value)
        return value


class RouteCache:
    """Active routes and their secrets, reread at most every `ttl` seconds (single flight):
    a secret set, rotated or removed is seen within `ttl`.

    A lookup in the second half of the `ttl` starts the next read in the background and is
    answered from the cache, so under steady traffic no delivery waits for a read (it took
    10-90 ms at 500 deliveries/s, and every delivery meanwhile waited: most of the ack p99,
    ADR 0058). A lookup past the `ttl` (an idle stretch, a failing read, `invalidate()`)
    waits for the read as before. An `invalidate()` while a read runs makes that read's
    result expire at once, so the next lookup reads again.

    Secret values stay in this process's memory only.
    """

    def __init__(
        self, engine: AsyncEngine, *, org_id: str | None, var_dir: Path, ttl: float
    ) -> None:
        self._sessions = session_factory(engine)
        self.org_id = org_id
        self.var_dir = var_dir
        self.ttl = ttl
        self._routes: dict[tuple[str, str], KnownRoute] = {}
        self._secrets = SecretFiles(var_dir)
        self._expires = 0.0
        self._generation = 0  # bumped by invalidate(): a read begun before it stays expired
        self._lock = asyncio.Lock()
        self._ahead: asyncio.Task[None] | None = None
        self._no_ahead_until = 0.0  # after a failed read ahead: none until the routes expire

    async def get(self, connector: str, route: str) -> KnownRoute | None:
        now = time.monotonic()
        if now >= self._expires:
            async with self._lock:
                if time.monotonic() >= self._expires:
                    await self._refresh()
        elif now >= max(self._expires - self.ttl / 2, self._no_ahead_until) and not self._ahead:
            self._ahead = asyncio.create_task(self._refresh_ahead(), name="route-cache-ahead")
        return self._routes.get((connector, route))

    def invalidate(self) -> None:
        self._generation += 1
        self._expires = 0.0

    async def _refresh_ahead(self) -> None:
        try:
            async with self._lock:
                if time.monotonic() >= self._expires - self.ttl / 2:  # nobody read meanwhile
                    await self._refresh()
        except ServiceUnavailable:  # logged by `_refresh`; the cached routes serve until they
            self._no_ahead_until = self._expires  # expire, then a lookup reads (and waits)
        finally:
            self._ahead = None

    async def _refresh(self) -> None:
        generation = self._generation
        try:
            async with unit_of_work(self._sessions, readonly=True) as session:
                active = await RouteRepository(session).active_routes(org_id=self.org_id)
        except Exception as exc:  # noqa: BLE001  (a driver failure: not ready to receive)
            log.warning("ingress.routes_unavailable", error_type=type(exc).__name__)
            raise ServiceUnavailable("the receipt store is unavailable; retry later") from None
        routes: dict[tuple[str, str], ActiveRoute] = {}
        orgs: dict[tuple[str, str], set[str]] = {}
        for found in active:
            routes[found.key] = found
            orgs.setdefault(found.key, set()).add(found.org_id)
        for key, owners in orgs.items():
            if len(owners) > 1:  # fail closed: never guess the org of a delivery
                log.error("ingress.route_org_ambiguous", connector=key[0], route=key[1])
                routes.pop(key)
        kept = list(routes.values())
        secrets = await asyncio.to_thread(self._secrets.read, kept)  # one hop for all routes
        self._routes = {
            found.key: KnownRoute(found, found.declaration.scheme, values)
            for found, values in zip(kept, secrets, strict=True)
        }
        if generation == self._generation:
            self._expires = time.monotonic() + self.ttl


class IngressService:
    def __init__(
        self,
        *,
        routes: RouteCache,
        writer: ReceiptWriter,
        var_dir: Path,
        default_max_body_bytes: int,
        snapshot_bytes: int,
    ) -> None:
        self.routes = routes
        self.writer = writer
        self.var_dir = var_dir
        self.default_max_body_bytes = default_max_body_bytes
        self.snapshot_bytes = snapshot_bytes

    async def receive(self, delivery: Delivery) -> Stored:
        """The ingress use case; raises a NexusError for every refusal."""
        label = delivery.connector
        try:
            known = await self.routes.get(delivery.connector, delivery.route)
            if known is None:
                label = "unknown"
                raise NotFound("no such webhook route")
            stored = await self._receive(delivery, known)
        except NexusError as exc:
            reason = exc.code.lower() if not isinstance(exc, SignatureRejected) else exc.reason
            _rejected(label, reason).inc()
            raise
        outcome = "duplicate" if stored.duplicate else "accepted"
        if stored.digest_mismatch:  # kept as the first body; counted on the receipt
            outcome = "digest_mismatch"
            log.warning(
                "ingress.redelivery_body_differs",
                connector=delivery.connector,
                route=delivery.route,
                receipt_id=stored.receipt_id,
            )
        _received(label, outcome).inc()
        return stored

    async def _receive(self, delivery: Delivery, known: KnownRoute) -> Stored:
        route, scheme = known.route, known.scheme
        declaration = route.declaration
        limit = declaration.max_body_bytes or self.default_max_body_bytes
        body = await _read_capped(delivery, limit)
        received_at = time.time()
        request = WebhookRequest(
            method=delivery.method,
            url=delivery.url,
            headers=delivery.headers,
            body=body,
            received_at_seconds=received_at,
        )
        verdict = verify_keys(scheme, known.keys, request)
        if not verdict.ok:
            log.warning(
                "ingress.signature_rejected",
                connector=declaration.connector,
                route=declaration.route,
                reason=str(verdict.reason),
            )
            raise SignatureRejected(str(verdict.reason))

        document = _json(body) if known.needs_json else None
        payload_sha256 = hashlib.sha256(body).hexdigest()
        delivery_id, source = _delivery_id(
            declaration.delivery_id, request, document, scheme.delivery_id(request)
        )
        if delivery_id is None:
            if verdict.signed_at is not None:
                seed = f"{verdict.signed_at:.3f}.{payload_sha256}".encode()
                delivery_id, source = "derived-" + hashlib.sha256(seed).hexdigest()[:40], "derived"
            else:
                delivery_id, source = "generated-" + uuid.uuid4().hex, "generated"
        elif len(delivery_id) > MAX_DELIVERY_ID:
            delivery_id = "sha256-" + hashlib.sha256(delivery_id.encode()).hexdigest()
        event_kind = _extract(declaration.event_kind, request, document)

        snapshot: bytes | None = body
        body_ref: str | None = None
        if len(body) > self.snapshot_bytes:
            snapshot = None
            body_ref = await asyncio.to_thread(keep_body, self.var_dir, payload_sha256, body)

        correlation = {"delivery_id": delivery_id}
        if delivery.request_id:
            correlation["request_id"] = delivery.request_id
        if declaration.source is not None:  # headers are not stored: keep what routing needs
            for key, how in (
                (SOURCE_KIND, declaration.source.object_kind),
                (SOURCE_ID, declaration.source.object_id),
            ):
                value = _extract(how, request, None) if how.header else None
                if value:
                    correlation[key] = fit(value, LANE_KEY_BYTES)
        row = ReceiptRow(
            org_id=route.org_id,
            receipt_id=new_receipt_id(),
            connector=declaration.connector,
            route_key=declaration.route,
            route_version=route.version,
            provider_delivery_id=delivery_id,
            delivery_id_source=source,
            method=delivery.method.upper()[:10],
            content_type=(request.header("content-type") or "")[:255] or None,
            event_kind=event_kind[:MAX_EVENT_KIND] if event_kind else None,
            correlation=correlation,
            body_bytes=len(body),
            body_snapshot=snapshot,
            body_ref=body_ref,
            payload_sha256=payload_sha256,
            signature_scheme=verdict.scheme,
            signature_key_index=verdict.key_index,
        )
        return await self.writer.store(row)


async def _read_capped(delivery: Delivery, limit: int) -> bytes:
    declared = delivery.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise WebhookTooLarge(f"the body exceeds this route's limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in delivery.body:
        size += len(chunk)
        if size > limit:
            raise WebhookTooLarge(f"the body exceeds this route's limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:  # not JSON: pointers find nothing
        return None


def _extract(how: Extract | None, request: WebhookRequest, document: object) -> str | None:
    if how is None:
        return None
    if how.header is not None:
        return request.header(how.header)
    value = resolve_pointer(document, how.pointer or "")
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text or None


def _delivery_id(
    how: Extract | None, request: WebhookRequest, document: object, from_scheme: str | None
) -> tuple[str | None, str]:
    if how is not None:
        return _extract(how, request, document), "header" if how.header else "pointer"
    return from_scheme, "scheme"
