"""Catalog's calls to Runtime's release API, as the `catalog` workload with a deadline.

Failures are translated here: Runtime refusing the release (4xx) is `RuntimeRefused` with
Runtime's code, message and field problems; Runtime unreachable, slow or broken is
`RuntimeUnavailable` (the job stays where it is and can be resumed).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from nexus.contracts.catalog import (
    RELEASE_PREPARE_PATH,
    RELEASE_REPLICAS_PATH,
    RELEASE_SCHEMA_PATH,
    RELEASE_STATE_PATH,
    ReleaseRequest,
    ReleaseState,
    ReplicaAcks,
)
from nexus.contracts.errors import BadRequest, UpstreamError
from nexus.platform.workload import WorkloadSigner

RUNTIME_AUDIENCE = "runtime-api"


class RuntimeRefused(BadRequest):
    default_code = "RUNTIME_REFUSED"


class RuntimeUnavailable(UpstreamError):
    default_code = "RUNTIME_UNAVAILABLE"


class RuntimeReleases:
    def __init__(
        self,
        *,
        base_url: str,
        signer: WorkloadSigner,
        client: httpx.AsyncClient,
        timeout_s: float = 120.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.client = client
        self.timeout_s = timeout_s

    async def state(self) -> ReleaseState:
        return ReleaseState.model_validate(await self._post(RELEASE_STATE_PATH, {}))

    async def schema(self, request: ReleaseRequest) -> ReleaseState:
        return ReleaseState.model_validate(
            await self._post(RELEASE_SCHEMA_PATH, request.model_dump(mode="json"))
        )

    async def prepare(self, request: ReleaseRequest) -> ReleaseState:
        return ReleaseState.model_validate(
            await self._post(RELEASE_PREPARE_PATH, request.model_dump(mode="json"))
        )

    async def replicas(self) -> ReplicaAcks:
        return ReplicaAcks.model_validate(await self._post(RELEASE_REPLICAS_PATH, {}))

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        deadline_ms = int((time.time() + self.timeout_s) * 1000)
        headers = self.signer.headers(RUNTIME_AUDIENCE, deadline_ms=deadline_ms)
        try:
            reply = await self.client.post(
                f"{self.base_url}{path}", json=body, headers=headers, timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            raise RuntimeUnavailable(
                f"Runtime could not be reached ({type(exc).__name__})"
            ) from None
        if reply.status_code == 200:
            return reply.json()
        try:
            error = reply.json()
        except ValueError:
            error = {}
        error = error if isinstance(error, dict) else {}
        code = str(error.get("code") or "")
        message = str(error.get("message") or f"Runtime answered {reply.status_code}")
        fields = error.get("fields") if isinstance(error.get("fields"), dict) else None
        if 400 <= reply.status_code < 500 and reply.status_code not in (401, 403, 408, 429):
            raise RuntimeRefused(message, code=code or None, fields=fields)
        raise RuntimeUnavailable(f"Runtime answered {reply.status_code} {code}".strip())
