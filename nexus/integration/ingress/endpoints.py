"""The webhook ingress endpoint: parse the request, call the ingress use case, answer.

`POST /hooks/{connector}/{route}` is served by a small ASGI handler ahead of FastAPI's
middleware stack and router (`RoleApp.serve_ahead`): at thousands of deliveries per second,
FastAPI's route matching and dependency solving cost more CPU than the ingress itself
(bench/RESULTS.md). It runs inside its own `RequestContextMiddleware` (request id, access
log, HTTP metrics) and answers errors with the one error envelope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive, Scope, Send

from nexus.contracts.errors import NexusError
from nexus.integration.ingress.service import Delivery
from nexus.platform.http import RequestContextMiddleware
from nexus.platform.json_text import compact_json

#: Where the gateway publishes `/hooks` (routes.toml: `/webhooks` -> integration `/hooks`).
PUBLIC_PREFIX = "/webhooks"
HOOKS_PREFIX = "/hooks/"
ROUTE_LABEL = "/hooks/{connector}/{route}"
_JSON = (b"content-type", b"application/json")


class HooksEndpoint:
    """The ASGI handler of `/hooks/...`, wrapped in the shared request context."""

    def __init__(self, *, role: str) -> None:
        self.handle = RequestContextMiddleware(self._hooks, role=role)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["nexus.route_label"] = ROUTE_LABEL
        await self.handle(scope, receive, send)

    async def _hooks(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = scope.get("state", {}).get("request_id")
        parts = scope["path"][len(HOOKS_PREFIX) :].split("/")
        if len(parts) != 2 or not all(parts):
            await _answer(send, 404, _error("NOT_FOUND", "no such webhook route", request_id))
            return
        if scope["method"] != "POST":
            await _answer(send, 405, _error("METHOD_NOT_ALLOWED", "use POST", request_id))
            return
        connector, route = parts
        app: Any = scope["app"]
        query = scope.get("query_string", b"").decode("latin-1")
        url = f"{app.state.public_base_url}{PUBLIC_PREFIX}/{connector}/{route}"
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            stored = await app.state.ingress.receive(
                Delivery(
                    connector=connector,
                    route=route,
                    method=scope["method"],
                    url=url + (f"?{query}" if query else ""),
                    headers=headers,
                    body=_body(receive),
                    request_id=request_id,
                )
            )
        except NexusError as exc:
            await _answer(send, exc.status, exc.body(request_id))
            return
        answer: dict[str, object] = {"receipt_id": stored.receipt_id, "duplicate": stored.duplicate}
        if stored.digest_mismatch:  # the body differs from the one received first
            answer["digest_mismatch"] = True
        await _answer(send, 200, answer)


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def _error(code: str, message: str, request_id: str | None) -> dict[str, Any]:
    return {"code": code, "message": message} | ({"request_id": request_id} if request_id else {})


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = compact_json(body).encode()
    headers = [_JSON, (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
