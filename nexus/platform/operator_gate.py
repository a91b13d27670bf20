"""Who may operate a role's admin API: asked of Runtime for every request, never decided by
the caller (DESIGN §7: authorization is Runtime's). Catalog and Integration use it.

The request's bearer token is exchanged for a delegation (`POST /internal/v1/identity/exchange`
with the role's workload token), then Runtime is asked `POST /internal/v1/runtime/operators/check`
for the role's area with that delegation. No token, or one Runtime rejects: 401. Runtime says
no (`INSUFFICIENT_ACCESS`, or `INSUFFICIENT_SCOPE`: a token without the `admin` scope): 403.
Runtime cannot be asked, is slow, or refuses this workload: 502/504, fail closed; the cause
is logged by status and code, never a token.
"""

from __future__ import annotations

import httpx

from nexus.contracts.errors import (
    Forbidden,
    NexusError,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from nexus.contracts.identity import EXCHANGE_PATH
from nexus.contracts.operators import (
    OPERATOR_CHECK_PATH,
    OperatorCheckRequest,
    OperatorCheckResponse,
)
from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.platform.http_client import InternalClient, InternalRefused, InternalUnreachable
from nexus.platform.observability import get_logger
from nexus.platform.secrets import workload_signer
from nexus.platform.settings import Settings

log = get_logger(__name__)

#: How long one admin request waits for Runtime's answer.
OPERATOR_CHECK_TIMEOUT_SECONDS = 5.0


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class OperatorGate:
    def __init__(self, runtime: InternalClient, *, area: str) -> None:
        self.runtime = runtime
        self.area = area

    async def operator(self, authorization: str | None) -> OperatorCheckResponse:
        token = bearer(authorization)
        if token is None:
            raise Unauthorized("a bearer access token is required", code="INVALID_SESSION_ID")
        try:
            exchanged = await self.runtime.post(EXCHANGE_PATH, {"credential": token})
            delegation = exchanged.get("delegation") if isinstance(exchanged, dict) else None
            if not isinstance(delegation, str):
                raise UpstreamError("Runtime answered the exchange without a delegation")
            return await self.runtime.post(
                OPERATOR_CHECK_PATH,
                OperatorCheckRequest(area=self.area).model_dump(),
                delegation=delegation,
                model=OperatorCheckResponse,
            )
        except InternalUnreachable as exc:
            if exc.timed_out:
                raise UpstreamTimeout("Runtime did not answer the operator check in time") from None
            log.warning("operators.check_unreachable", area=self.area, error=exc.error)
            raise UpstreamError("Runtime cannot be reached to authorize the operator") from None
        except InternalRefused as exc:
            raise self._refused(exc) from None

    def _refused(self, exc: InternalRefused) -> NexusError:
        if exc.status == 401:
            return Unauthorized(
                exc.message or "the access token is not valid", code=exc.code or None
            )
        if exc.status == 403 and exc.code in ("INSUFFICIENT_ACCESS", "INSUFFICIENT_SCOPE"):
            return Forbidden(
                exc.message or f"operating {self.area} needs a System Administrator",
                code=exc.code,
            )
        # Runtime refused this workload or broke: the deployment is wrong, not the user.
        log.warning("operators.check_failed", area=self.area, status=exc.status, code=exc.code)
        return UpstreamError(
            f"Runtime could not authorize the operator (status {exc.status})",
            code="OPERATOR_CHECK_FAILED",
        )


def operator_gate(settings: Settings, area: str, client: httpx.AsyncClient) -> OperatorGate:
    """The gate of the role whose workload and admin area are both `area`."""
    runtime = InternalClient(
        base_url=settings.upstream_url("runtime-api"),
        signer=workload_signer(settings, area),
        audience=RUNTIME_AUDIENCE,
        client=client,
        timeout_s=OPERATOR_CHECK_TIMEOUT_SECONDS,
    )
    return OperatorGate(runtime, area=area)
