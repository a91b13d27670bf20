"""Who may operate the catalog admin API: asked of Runtime for every request (DESIGN §7).

The request's bearer token is exchanged for a delegation (`/internal/v1/identity/exchange`,
as the `catalog` workload) and Runtime is asked `operators/check` for area `catalog`. No
token or one Runtime rejects: 401; Runtime says no: 403; Runtime unreachable: 502/504 (fail
closed). Integration's admin API follows the same protocol (`nexus/integration/operator_auth.py`).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from nexus.contracts.errors import Forbidden, Unauthorized, UpstreamError, UpstreamTimeout
from nexus.contracts.operators import (
    OPERATOR_CHECK_PATH,
    OperatorCheckRequest,
    OperatorCheckResponse,
)
from nexus.platform.workload import WorkloadSigner

EXCHANGE_PATH = "/internal/v1/identity/exchange"
RUNTIME_AUDIENCE = "runtime-api"


class CatalogOperatorGate:
    def __init__(
        self, *, runtime_url: str, signer: WorkloadSigner, client: httpx.AsyncClient
    ) -> None:
        self.runtime_url = runtime_url.rstrip("/")
        self.signer = signer
        self.client = client

    async def operator(self, authorization: str | None) -> OperatorCheckResponse:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("a bearer access token is required", code="INVALID_SESSION_ID")
        deadline_ms = int((time.time() + 5) * 1000)
        headers = self.signer.headers(RUNTIME_AUDIENCE, deadline_ms=deadline_ms)
        exchanged = await self._call(EXCHANGE_PATH, {"credential": token.strip()}, headers)
        delegation = exchanged.get("delegation") if isinstance(exchanged, dict) else None
        if not isinstance(delegation, str):
            raise UpstreamError("Runtime answered the exchange without a delegation")
        checked = await self._call(
            OPERATOR_CHECK_PATH,
            OperatorCheckRequest(area="catalog").model_dump(),
            self.signer.headers(RUNTIME_AUDIENCE, deadline_ms=deadline_ms, delegation=delegation),
        )
        return OperatorCheckResponse.model_validate(checked)

    async def _call(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        try:
            reply = await self.client.post(
                f"{self.runtime_url}{path}", json=body, headers=headers, timeout=5
            )
        except httpx.TimeoutException:
            raise UpstreamTimeout("Runtime did not answer the operator check in time") from None
        except httpx.HTTPError:
            raise UpstreamError("Runtime cannot be reached to authorize the operator") from None
        if reply.status_code == 200:
            return reply.json()
        if reply.status_code == 401:
            raise Unauthorized("the access token is not valid")
        if reply.status_code == 403:
            raise Forbidden("operating the catalog needs a System Administrator")
        raise UpstreamError(f"Runtime could not authorize the operator ({reply.status_code})")
