"""The webhook ingress endpoint: parse the request, call the ingress use case, answer."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from nexus.integration.service import Delivery, IngressService

router = APIRouter()

#: Where the gateway publishes `/hooks` (routes.toml: `/webhooks` -> integration `/hooks`).
PUBLIC_PREFIX = "/webhooks"


@router.post("/hooks/{connector}/{route}")
async def receive_webhook(connector: str, route: str, request: Request) -> JSONResponse:
    ingress: IngressService = request.app.state.ingress
    base = request.app.state.public_base_url
    query = request.url.query
    url = f"{base}{PUBLIC_PREFIX}/{connector}/{route}" + (f"?{query}" if query else "")
    stored = await ingress.receive(
        Delivery(
            connector=connector,
            route=route,
            method=request.method,
            url=url,
            headers=request.headers,
            body=request.stream(),
            request_id=getattr(request.state, "request_id", None),
        )
    )
    return JSONResponse({"receipt_id": stored.receipt_id, "duplicate": stored.duplicate})
