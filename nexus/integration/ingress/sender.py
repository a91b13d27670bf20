"""Build a signed test delivery for a route, as its provider would send it (`hooks send`)."""

from __future__ import annotations

import time
import uuid

from nexus.integration.ingress.signatures import sign
from nexus.integration.routing.routes import RouteDeclaration


def signed_headers(
    declaration: RouteDeclaration,
    secret: str,
    *,
    body: bytes,
    url: str,
    event_kind: str | None = None,
    delivery_id: str | None = None,
    now: float | None = None,
) -> dict[str, str]:
    """Content type, the scheme's signature headers, and the route's id/kind headers."""
    delivery_id = delivery_id or f"nexus-test-{uuid.uuid4().hex}"
    headers = {"Content-Type": "application/json"}
    headers |= sign(
        declaration.scheme,
        secret,
        body=body,
        now_seconds=time.time() if now is None else now,
        url=url,
        delivery_id=delivery_id,
    )
    lowered = {name.lower() for name in headers}
    id_header = declaration.delivery_id.header if declaration.delivery_id else None
    if id_header is not None and id_header.lower() not in lowered:
        headers[id_header] = delivery_id
    if event_kind is not None:
        if declaration.event_kind is None or declaration.event_kind.header is None:
            raise ValueError("this route reads the event kind from the body, not a header")
        headers[declaration.event_kind.header] = event_kind
    return headers
