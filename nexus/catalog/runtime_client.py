"""Catalog's calls to Runtime's release API, as the `catalog` workload with a deadline.

Failures are translated here: Runtime refusing the release (4xx) is `RuntimeRefused` with
Runtime's code, message and field problems; Runtime unreachable, slow or broken is
`RuntimeUnavailable` (the job stays where it is and can be resumed).
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

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
from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.platform.http_client import InternalClient, InternalRefused, InternalUnreachable
from nexus.platform.workload import WorkloadSigner

M = TypeVar("M", bound=BaseModel)


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
        self.runtime = InternalClient(
            base_url=base_url,
            signer=signer,
            audience=RUNTIME_AUDIENCE,
            client=client,
            timeout_s=timeout_s,
        )

    async def state(self) -> ReleaseState:
        return await self._post(RELEASE_STATE_PATH, {}, ReleaseState)

    async def schema(self, request: ReleaseRequest) -> ReleaseState:
        return await self._post(RELEASE_SCHEMA_PATH, request.model_dump(mode="json"), ReleaseState)

    async def prepare(self, request: ReleaseRequest) -> ReleaseState:
        return await self._post(RELEASE_PREPARE_PATH, request.model_dump(mode="json"), ReleaseState)

    async def replicas(self) -> ReplicaAcks:
        return await self._post(RELEASE_REPLICAS_PATH, {}, ReplicaAcks)

    async def _post(self, path: str, body: dict[str, Any], model: type[M]) -> M:
        try:
            return await self.runtime.post(path, body, model=model)
        except InternalUnreachable as exc:
            raise RuntimeUnavailable(f"Runtime could not be reached ({exc.error})") from None
        except InternalRefused as exc:
            if 400 <= exc.status < 500 and exc.status not in (401, 403, 408, 429):
                raise RuntimeRefused(
                    exc.message or f"Runtime answered {exc.status}",
                    code=exc.code or None,
                    fields=exc.fields,
                ) from None
            raise RuntimeUnavailable(f"Runtime answered {exc.status} {exc.code}".strip()) from None
