"""Who may operate the integration: asked of Runtime for every admin request, never decided
here (DESIGN §7: authorization is Runtime's).

An admin request carries the user's bearer token. Integration exchanges it for a delegation
(`POST /internal/v1/identity/exchange`, with its own workload token and a deadline), then asks
`POST /internal/v1/runtime/operators/check` with that delegation. No token, or a token Runtime
rejects: 401. Runtime says no: 403. Runtime cannot be asked or refuses this workload: 502/504
(fail closed; the cause is logged by status and code, never a token).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from nexus.contracts.errors import (
    Forbidden,
    NexusError,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from nexus.contracts.operators import (
    OPERATOR_CHECK_PATH,
    OperatorCheckRequest,
    OperatorCheckResponse,
)
from nexus.integration.operations import Operator
from nexus.platform.observability import get_logger
from nexus.platform.workload import WorkloadSigner

log = get_logger(__name__)

EXCHANGE_PATH = "/internal/v1/identity/exchange"
RUNTIME_AUDIENCE = "runtime-api"
AREA = "integration"


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class OperatorGate:
    def __init__(
        self,
        *,
        runtime_url: str,
        signer: WorkloadSigner,
        client: httpx.AsyncClient,
        timeout_s: float = 5.0,
    ) -> None:
        self.runtime_url = runtime_url.rstrip("/")
        self.signer = signer
        self.client = client
        self.timeout_s = timeout_s

    async def operator(self, authorization: str | None) -> Operator:
        token = bearer(authorization)
        if token is None:
            raise Unauthorized("a bearer access token is required", code="INVALID_SESSION_ID")
        deadline_ms = int((time.time() + self.timeout_s) * 1000)
        exchanged = await self._call(
            EXCHANGE_PATH,
            {"credential": token},
            self.signer.headers(RUNTIME_AUDIENCE, deadline_ms=deadline_ms),
        )
        delegation = exchanged.get("delegation")
        if not isinstance(delegation, str):
            raise UpstreamError("Runtime answered the exchange without a delegation")
        checked = await self._call(
            OPERATOR_CHECK_PATH,
            OperatorCheckRequest(area=AREA).model_dump(),
            self.signer.headers(RUNTIME_AUDIENCE, deadline_ms=deadline_ms, delegation=delegation),
        )
        answer = OperatorCheckResponse.model_validate(checked)
        return Operator(org_id=answer.org_id, user_id=answer.user_id)

    async def _call(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        try:
            reply = await self.client.post(
                f"{self.runtime_url}{path}", json=body, headers=headers, timeout=self.timeout_s
            )
        except httpx.TimeoutException:
            raise UpstreamTimeout("Runtime did not answer the operator check in time") from None
        except httpx.HTTPError as exc:
            log.warning("integration.operator_check_unreachable", error=type(exc).__name__)
            raise UpstreamError("Runtime cannot be reached to authorize the operator") from None
        if reply.status_code == 200:
            return reply.json()
        try:
            error = reply.json()
        except ValueError:
            error = {}
        code = str(error.get("code", "")) if isinstance(error, dict) else ""
        message = str(error.get("message", "")) if isinstance(error, dict) else ""
        if reply.status_code == 401:
            raise Unauthorized(message or "the access token is not valid", code=code or None)
        if reply.status_code == 403 and code == "INSUFFICIENT_ACCESS":
            raise Forbidden(message or "not allowed to operate the integration", code=code)
        log.warning("integration.operator_check_failed", status=reply.status_code, code=code)
        raise _misconfigured(reply.status_code)


def _misconfigured(status: int) -> NexusError:
    """Runtime refused this workload or broke: the deployment is wrong, not the user."""
    return UpstreamError(
        f"Runtime could not authorize the operator (status {status})",
        code="OPERATOR_CHECK_FAILED",
    )
