"""HTTP plumbing every role shares: request ids, access log, metrics, errors, ops endpoints."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nexus import __version__
from nexus.contracts.errors import ErrorBody, NexusError
from nexus.contracts.ops import CheckResult, Health, Readiness, VersionInfo
from nexus.platform.observability import BUILD_INFO, HTTP_LATENCY, HTTP_REQUESTS, get_logger

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID_SHAPE = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")
ENGINE_GENERATION = 1

log = get_logger(__name__)

ReadinessCheck = Callable[[], Awaitable[CheckResult]]


def new_request_id() -> str:
    return uuid.uuid4().hex


def accept_request_id(raw: str | None) -> str:
    """Keep a caller's request id only when it has a safe shape; otherwise mint one."""
    if raw and _REQUEST_ID_SHAPE.fullmatch(raw):
        return raw
    return new_request_id()


def current_request_id() -> str | None:
    value = structlog.contextvars.get_contextvars().get("request_id")
    return str(value) if value is not None else None


class RequestContextMiddleware:
    """Pure ASGI (streaming-safe): request id in and out, access log line, metrics."""

    def __init__(self, app: ASGIApp, *, role: str) -> None:
        self.app = app
        self.role = role

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(REQUEST_ID_HEADER.encode())
        request_id = accept_request_id(raw.decode("latin-1") if raw else None)
        scope.setdefault("state", {})["request_id"] = request_id
        status_holder = {"status": 500}
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                status_holder["started"] = 1
                response_headers = [
                    (k, v) for k, v in message.get("headers", []) if k != REQUEST_ID_HEADER.encode()
                ]
                response_headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
                message["headers"] = response_headers
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:  # a bug: answer 500 with the request id, log once
                log.error("http.unhandled_error", error_type=type(exc).__name__, exc_info=exc)
                if status_holder.get("started"):
                    raise
                status_holder["status"] = 500
                body = ErrorBody(
                    code="INTERNAL_ERROR", message="internal error", request_id=request_id
                )
                await JSONResponse(body.model_dump(exclude_none=True), status_code=500)(
                    scope, receive, send_with_id
                )
            finally:
                elapsed = time.perf_counter() - started
                route = _route_label(scope)
                status = status_holder["status"]
                HTTP_REQUESTS.labels(self.role, route, scope["method"], str(status)).inc()
                HTTP_LATENCY.labels(self.role, route).observe(elapsed)
                if route not in _QUIET_ROUTES:
                    log.info(
                        "http.request",
                        method=scope["method"],
                        path=scope["path"],  # never the query string: it may carry tokens
                        status=status,
                        duration_ms=round(elapsed * 1000, 2),
                    )


_QUIET_ROUTES = frozenset({"/healthz", "/metrics"})


def _route_label(scope: Scope) -> str:
    label = scope.get("nexus.route_label")
    if label:
        return str(label)
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


def error_response(error: NexusError, request_id: str | None) -> JSONResponse:
    return JSONResponse(error.body(request_id), status_code=error.status)


def install_error_handlers(app: FastAPI) -> None:
    async def nexus_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, NexusError):  # pragma: no cover - registered for NexusError
            raise exc
        return error_response(exc, getattr(request.state, "request_id", None))

    async def validation_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, RequestValidationError):  # pragma: no cover - registered so
            raise exc
        fields = {
            ".".join(str(p) for p in err["loc"]): str(err["msg"]) for err in exc.errors()[:20]
        }
        body = ErrorBody(
            code="BAD_REQUEST",
            message="the request is not valid",
            request_id=getattr(request.state, "request_id", None),
            fields=fields,
        )
        return JSONResponse(body.model_dump(exclude_none=True), status_code=400)

    app.add_exception_handler(NexusError, nexus_error)
    app.add_exception_handler(RequestValidationError, validation_error)


@dataclass
class OpsInfo:
    """What a role tells about itself on /healthz, /readyz, /version."""

    role: str
    capabilities: Sequence[str]
    app: str | None = None
    route_table_version: str | None = None
    readiness_checks: list[ReadinessCheck] = field(default_factory=list)


def ops_router(info: OpsInfo) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        return Health(role=info.role)

    @router.get("/readyz", response_model=Readiness)
    async def readyz(response: Response) -> Readiness:
        checks = list(await asyncio.gather(*(check() for check in info.readiness_checks)))
        ready = all(c.ok for c in checks)
        response.status_code = 200 if ready else 503
        return Readiness(status="ready" if ready else "not_ready", role=info.role, checks=checks)

    @router.get("/version", response_model=VersionInfo, response_model_exclude_none=True)
    async def version() -> VersionInfo:
        return VersionInfo(
            version=__version__,
            role=info.role,
            app=info.app,
            engine_generation=ENGINE_GENERATION,
            capabilities=list(info.capabilities),
            route_table_version=info.route_table_version,
        )

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return router


def create_role_app(info: OpsInfo, *, lifespan: Any = None) -> FastAPI:
    """A FastAPI app with the shared middleware, error handlers and ops endpoints."""
    app = FastAPI(
        title=f"nexus {info.role}",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    install_error_handlers(app)
    app.include_router(ops_router(info))
    app.add_middleware(RequestContextMiddleware, role=info.role)
    BUILD_INFO.labels(__version__, info.role).set(1)
    return app
