"""A stand-in for Runtime's AcceptCommand, single (`POST /internal/v1/runtime/commands`) and
batch (`.../commands/batch`), served over real HTTP by the tests that exercise Integration
without a Runtime.

It answers by the command's external id, `<behaviour>-<anything>`: `ok` (and anything not
listed) 202 accepted, then 202 duplicate for a repeated message id; `bad` 400; `conflict`
409; `busy` 503 with Retry-After 7; `flagged` 400 marked retryable; `expired` 401; `html`
502 without a JSON body; `slow` answers 202 after `slow_seconds`. With `public_key`, a call
without a valid workload token for `runtime-api` gets 401 and is not recorded as accepted.

In a batch, `bad`, `conflict` and `flagged` refuse only their own command (per-command
results, as Runtime does); `busy`, `expired` and `html` answer the whole request as above (as
Runtime's database or authentication failures do) and `slow` delays it. `calls` records one
entry per command (a batch's commands share its headers); `requests` one per HTTP request.
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
COMMANDS_BATCH_PATH = "/internal/v1/runtime/commands/batch"
WHOLE_REQUEST = ("busy", "expired", "html")
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
    requests: list[dict[str, Any]] = field(default_factory=list)  # path, commands, at
    accepted: dict[str, float] = field(default_factory=dict)  # message id -> first accepted at

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(COMMANDS_PATH, self._commands, methods=["POST"]),
                Route(COMMANDS_BATCH_PATH, self._batch, methods=["POST"]),
            ]
        )

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
        self.requests.append({"path": COMMANDS_PATH, "commands": 1, "at": time.time()})
        self.calls.append({"headers": dict(request.headers), "body": body, "at": time.time()})
        if not self._verified(request.headers.get(WORKLOAD_HEADER)):
            return JSONResponse({"code": "UNAUTHENTICATED"}, status_code=401)
        behaviour = _behaviour(body)
        if behaviour == "slow":
            await asyncio.sleep(self.slow_seconds)
        if behaviour == "html":
            return JSONResponse("<html>bad gateway</html>", status_code=502)
        if behaviour in ANSWERS:
            status, payload, headers = ANSWERS[behaviour]
            return JSONResponse(payload, status_code=status, headers=headers)
        return JSONResponse(self._accept(body["message_id"]), status_code=202)

    async def _batch(self, request: Request) -> JSONResponse:
        commands = (await request.json())["commands"]
        now = time.time()
        self.requests.append({"path": COMMANDS_BATCH_PATH, "commands": len(commands), "at": now})
        request_headers = dict(request.headers)
        self.calls.extend({"headers": request_headers, "body": c, "at": now} for c in commands)
        if not self._verified(request.headers.get(WORKLOAD_HEADER)):
            return JSONResponse({"code": "UNAUTHENTICATED"}, status_code=401)
        behaviours = [_behaviour(c) for c in commands]
        if "slow" in behaviours:
            await asyncio.sleep(self.slow_seconds)
        for whole in WHOLE_REQUEST:
            if whole in behaviours:
                if whole == "html":
                    return JSONResponse("<html>bad gateway</html>", status_code=502)
                status, payload, headers = ANSWERS[whole]
                return JSONResponse(payload, status_code=status, headers=headers)
        results = []
        for command, behaviour in zip(commands, behaviours, strict=True):
            if behaviour in ANSWERS:
                status, payload, _ = ANSWERS[behaviour]
                results.append(
                    {
                        "message_id": command["message_id"],
                        "status": "conflict" if status == 409 else "refused",
                        "error": {
                            "status": status,
                            "message": "refused",
                            **payload,
                            "retryable": payload.get("retryable", status >= 500),
                        },
                    }
                )
            else:
                results.append(self._accept(command["message_id"]))
        return JSONResponse({"results": results})

    def _accept(self, message_id: str) -> dict[str, Any]:
        duplicate = message_id in self.accepted
        self.accepted.setdefault(message_id, time.time())
        return {
            "message_id": message_id,
            "work_id": "w" + message_id,
            "status": "duplicate" if duplicate else "accepted",
        }


def _behaviour(command: dict[str, Any]) -> str:
    return str(command["command"]["external_id"]).split("-")[0]
