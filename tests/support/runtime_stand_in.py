"""A stand-in for Runtime's `POST /internal/v1/runtime/commands` (AcceptCommand), served over
real HTTP by the tests, until Runtime's own endpoint is wired into them.

It answers by the command's external id, `<behaviour>-<anything>`: `ok` (and anything not
listed) 202 accepted, then 202 duplicate for a repeated message id; `bad` 400; `conflict`
409; `busy` 503 with Retry-After 7; `flagged` 400 marked retryable; `expired` 401; `html`
502 without a JSON body; `slow` answers 202 after `slow_seconds`. With `public_key`, a call
without a valid workload token for `runtime-api` gets 401 and is not recorded as accepted.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from nexus.platform.workload import WORKLOAD_HEADER

COMMANDS_PATH = "/internal/v1/runtime/commands"
ANSWERS: dict[str, tuple[int, dict[str, Any], dict[str, str]]] = {
    "bad": (400, {"code": "VALIDATION_ERROR", "message": "LastName 'Ada' is bad"}, {}),
    "conflict": (409, {"code": "IDEMPOTENCY_CONFLICT", "message": "another command"}, {}),
    "busy": (503, {"code": "UNAVAILABLE", "message": "try later"}, {"retry-after": "7"}),
    "flagged": (400, {"code": "STALE_METADATA", "retryable": True}, {}),
    "expired": (401, {"code": "UNAUTHENTICATED"}, {}),
}


@dataclass
class StandIn:
    public_key: ECKey | None = None
    slow_seconds: float = 1.5
    url: str = ""  # where the test serves it
    calls: list[dict[str, Any]] = field(default_factory=list)
    accepted: dict[str, float] = field(default_factory=dict)  # message id -> first accepted at

    def app(self) -> Starlette:
        return Starlette(routes=[Route(COMMANDS_PATH, self._commands, methods=["POST"])])

    def _verified(self, token: str | None) -> bool:
        if self.public_key is None:
            return True
        try:
            claims = jwt.decode(token or "", self.public_key, algorithms=["ES256"]).claims
        except (JoseError, ValueError):
            return False
        return claims.get("aud") == "runtime-api" and claims.get("iss") == "integration"

    async def _commands(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.calls.append({"headers": dict(request.headers), "body": body, "at": time.time()})
        if not self._verified(request.headers.get(WORKLOAD_HEADER)):
            return JSONResponse({"code": "UNAUTHENTICATED"}, status_code=401)
        message_id = body["message_id"]
        behaviour = body["command"]["external_id"].split("-")[0]
        if behaviour == "slow":
            await asyncio.sleep(self.slow_seconds)
        if behaviour == "html":
            return JSONResponse("<html>bad gateway</html>", status_code=502)
        if behaviour in ANSWERS:
            status, payload, headers = ANSWERS[behaviour]
            return JSONResponse(payload, status_code=status, headers=headers)
        duplicate = message_id in self.accepted
        self.accepted.setdefault(message_id, time.time())
        return JSONResponse(
            {
                "message_id": message_id,
                "work_id": "w" + message_id,
                "status": "duplicate" if duplicate else "accepted",
            },
            status_code=202,
        )
