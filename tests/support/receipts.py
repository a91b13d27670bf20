"""Receipt rows as ingress stores them (for router tests and the pipeline benchmark)."""

from __future__ import annotations

import hashlib
import uuid

from nexus.integration.ingress.repository import ReceiptRow


def receipt_row(
    *,
    org_id: str,
    connector: str,
    route: str,
    body: bytes,
    body_ref: str | None = None,
    correlation: dict[str, str] | None = None,
) -> ReceiptRow:
    """A verified delivery of `body` (kept in the row, or at `body_ref` when given)."""
    delivery = uuid.uuid4().hex
    return ReceiptRow(
        org_id=org_id,
        receipt_id=uuid.uuid4().hex,
        connector=connector,
        route_key=route,
        route_version=1,
        provider_delivery_id=delivery,
        delivery_id_source="header",
        method="POST",
        content_type="application/json",
        event_kind="test.event",
        correlation={"delivery_id": delivery} | (correlation or {}),
        body_bytes=len(body),
        body_snapshot=None if body_ref else body,
        body_ref=body_ref,
        payload_sha256=hashlib.sha256(body).hexdigest(),
        signature_scheme="hmac",
        signature_key_index=0,
    )
