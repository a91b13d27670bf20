"""HTTP plumbing every role shares: request ids, security headers, access log, metrics,
errors, ops endpoints.

Logs and metric labels name a request by its route template (`/services/data/{version}/
sobjects/{name}/{field}/{value:path}`, or the gateway's `proxy:<upstream>:<prefix>`), never
by its path or query string: those carry record ids, external id values and SOQL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nexus import __version__
from nexus.contracts.errors import (
    BadRequest,
    ErrorBody,
    MethodNotAllowed,
    NexusError,
    NotFound,
    ServiceUnavailable,
)
from nexus.contracts.ops import CheckResult, Health, Readiness, VersionInfo
from nexus.platform.db.errors import is_busy
from nexus.platform.draining import is_draining
from nexus.platform.observability import (
    BUILD_INFO,
    HTTP_LATENCY,
    HTTP_REQUESTS,
    ROLE_RESTARTS,
    get_logger,
)
from nexus.platform.supervisor import restarts_from_env

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID_SHAPE = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")
ENGINE_GENERATION = 1

log = get_logger(__name__)

ReadinessCheck = Callable[[], Awaitable[CheckResult]]


def new_request_id() -> str:
    return os.urandom(16).hex()  # uuid4().hex's shape without building a UUID


def accept_request_id(raw: str | None) -> str:
    """Keep a caller's request id only when it has a safe shape; otherwise mint one."""
    if raw and _REQUEST_ID_SHAPE.fullmatch(raw):
        return raw
    return new_request_id()


def current_request_id() -> str | None:
    value = structlog.contextvars.get_contextvars().get("request_id")
    return str(value) if value is not None else None


_REQUEST_ID_KEY = REQUEST_ID_HEADER.encode()
#: On every answer of every role: browsers must not guess a type other than the declared one.
_NOSNIFF = (b"x-content-type-options", b"nosniff")
#: On every answer served over TLS: browsers use HTTPS only for the next year (RFC 6797).
_HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")
#: Response headers this middleware owns: an app's (or an upstream's) own copy is replaced.
_OWN_HEADERS = frozenset({_REQUEST_ID_KEY, _NOSNIFF[0], _HSTS[0]})
_QUIET_ROUTES = frozenset({"/healthz", "/metrics"})
#: Every role's own endpoints (`ops_router`).
OPS_PATHS = frozenset({"/healthz", "/readyz", "/version", "/metrics"})
_access_log = logging.getLogger(__name__)  # the stdlib logger behind `log`


class _RequestMetrics:
    """The HTTP counter and histogram children of one role, looked up once per label set.

    `labels()` builds a key and takes a lock on every call; at thousands of requests per
    second that is a measurable share of a trivial request. Label sets are bounded (route
    templates x methods x statuses), and the cache is capped all the same.
    """

    MAX_CHILDREN = 4096

    def __init__(self, role: str) -> None:
        self.role = role
        self._requests: dict[tuple[str, str, int], Any] = {}
        self._latency: dict[str, Any] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        counter = self._requests.get((route, method, status))
        if counter is None:
            counter = HTTP_REQUESTS.labels(self.role, route, method, str(status))
            if len(self._requests) < self.MAX_CHILDREN:
                self._requests[(route, method, status)] = counter
        counter.inc()
        histogram = self._latency.get(route)
        if histogram is None:
            histogram = HTTP_LATENCY.labels(self.role, route)
            if len(self._latency) < self.MAX_CHILDREN:
                self._latency[route] = histogram
        histogram.observe(seconds)


class RequestContextMiddleware:
    """Pure ASGI (streaming-safe): request id in and out, security headers
    (`X-Content-Type-Options: nosniff` always, `Strict-Transport-Security` over TLS), access
    log line (route template, status, duration), metrics.

    On the path of every request of every role, so it allocates little: no header dict, no
    context-manager objects, metric children cached, the access line built only when INFO
    is enabled.
    """

    def __init__(self, app: ASGIApp, *, role: str) -> None:
        self.app = app
        self.role = role
        self.metrics = _RequestMetrics(role)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = None
        for name, value in scope["headers"]:
            if name == _REQUEST_ID_KEY:
                raw = value
                break
        request_id = accept_request_id(raw.decode("latin-1") if raw else None)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        started_response = False
        started = time.perf_counter()
        over_tls = scope.get("scheme") == "https"

        async def send_with_id(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                status = message["status"]
                started_response = True
                headers = [h for h in message.get("headers", ()) if h[0] not in _OWN_HEADERS]
                headers.append((_REQUEST_ID_KEY, request_id.encode()))
                headers.append(_NOSNIFF)
                if over_tls:
                    headers.append(_HSTS)
                message["headers"] = headers
            await send(message)

        tokens = structlog.contextvars.bind_contextvars(request_id=request_id)
        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # a bug: answer 500 with the request id, log once
            log.error("http.unhandled_error", error_type=type(exc).__name__, exc_info=exc)
            if started_response:
                raise
            status = 500
            body = ErrorBody(code="INTERNAL_ERROR", message="internal error", request_id=request_id)
            await JSONResponse(body.model_dump(exclude_none=True), status_code=500)(
                scope, receive, send_with_id
            )
        finally:
            elapsed = time.perf_counter() - started
            route = _route_label(scope)
            self.metrics.observe(route, scope["method"], status, elapsed)
            if route not in _QUIET_ROUTES and _access_log.isEnabledFor(logging.INFO):
                log.info(
                    "http.request",
                    method=scope["method"],
                    # the template, never the path or query: they carry ids, values, tokens
                    route=route,
                    status=status,
                    duration_ms=round(elapsed * 1000, 2),
                )
            structlog.contextvars.reset_contextvars(**tokens)


def _route_label(scope: Scope) -> str:
    label = scope.get("nexus.route_label")
    if label:
        return str(label)
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


def error_response(error: NexusError, request_id: str | None) -> JSONResponse:
    return JSONResponse(error.body(request_id), status_code=error.status)


#: What a 503 for a busy database tells the caller to wait before retrying.
DATABASE_RETRY_AFTER_SECONDS = 1


def framework_error(request: Request, exc: StarletteHTTPException) -> NexusError:
    """What Starlette or FastAPI refused before any Nexus code ran, as a Nexus error: a path
    no route takes (404), a method it does not take (405), a body that could not be parsed
    (400: e.g. JSON nested too deeply for the parser)."""
    if exc.status_code == HTTPStatus.BAD_REQUEST:
        return BadRequest("the request body could not be parsed", code="MALFORMED_BODY")
    if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED:
        return MethodNotAllowed("method not allowed")
    return NotFound(f"no route for {request.method} {request.url.path}")


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

    async def http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, StarletteHTTPException):  # pragma: no cover - registered so
            raise exc
        error = framework_error(request, exc)
        return error_response(error, getattr(request.state, "request_id", None))

    async def database_busy(request: Request, exc: Exception) -> Response:
        """The database did not take the transaction in time: every pooled connection in use
        past the pool timeout, SQLite's write lock held past the busy timeout, an InnoDB lock
        wait or deadlock, or the server unreachable. Nothing was written; the caller may
        retry: 503 with Retry-After, never a 500 (and never the driver's text: it can quote
        SQL and values)."""
        if isinstance(exc, OperationalError) and not is_busy(exc):
            raise exc  # a fault in the statement or the schema: the 500 it is
        log.warning("http.database_busy", error=type(exc).__name__)
        error = ServiceUnavailable("the database is busy: retry shortly", code="DATABASE_BUSY")
        response = error_response(error, getattr(request.state, "request_id", None))
        response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
        return response

    app.add_exception_handler(NexusError, nexus_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(PoolTimeout, database_busy)
    app.add_exception_handler(OperationalError, database_busy)


@dataclass
class OpsInfo:
    """What a role tells about itself on /healthz, /readyz, /version."""

    role: str
    capabilities: Sequence[str]
    app: str | None = None
    route_table_version: str | None = None
    readiness_checks: list[ReadinessCheck] = field(default_factory=list)
    #: what /version reports as the active release (an App service's verified snapshot)
    release: Callable[[], dict[str, Any] | None] = lambda: None
    #: asked with the request's Authorization header before /version and /metrics answer;
    #: raises a `NexusError` to refuse (the gateway's public port: its ops token)
    ops_guard: Callable[[str | None], None] | None = None


def ops_router(info: OpsInfo) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        return Health(role=info.role)

    @router.get("/readyz", response_model=Readiness)
    async def readyz(response: Response) -> Readiness:
        checks = list(await asyncio.gather(*(check() for check in info.readiness_checks)))
        if is_draining():
            checks.append(CheckResult(name="draining", ok=False, detail="shutting down"))
        ready = all(c.ok for c in checks)
        response.status_code = 200 if ready else 503
        return Readiness(status="ready" if ready else "not_ready", role=info.role, checks=checks)

    def guarded(request: Request) -> None:
        if info.ops_guard is not None:
            info.ops_guard(request.headers.get("authorization"))

    @router.get("/version", response_model=VersionInfo, response_model_exclude_none=True)
    async def version(request: Request) -> VersionInfo:
        guarded(request)
        return VersionInfo(
            version=__version__,
            role=info.role,
            app=info.app,
            engine_generation=ENGINE_GENERATION,
            capabilities=list(info.capabilities),
            route_table_version=info.route_table_version,
            release=info.release(),
        )

    @router.get("/metrics")
    async def metrics(request: Request) -> Response:
        guarded(request)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return router


class RoleApp(FastAPI):
    """FastAPI, plus plain ASGI handlers served ahead of its middleware stack and router.

    For a hot path that needs none of FastAPI (the webhook ingress): each request still
    passes FastAPI's own error, telemetry and body-limit middleware and Starlette's entry
    before it reaches a user middleware; `serve_ahead` skips them. A handler brings its own
    request context (wrap it in `RequestContextMiddleware`) and finds the app in
    `scope["app"]`.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._ahead: list[tuple[str, ASGIApp, frozenset[str]]] = []

    def serve_ahead(
        self, prefix: str, handler: ASGIApp, *, unless: frozenset[str] = frozenset()
    ) -> None:
        """HTTP requests whose path starts with `prefix` (and is not one of `unless`) go
        straight to `handler`."""
        self._ahead.append((prefix, handler, unless))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            for prefix, handler, unless in self._ahead:
                if path.startswith(prefix) and path not in unless:
                    scope["app"] = self
                    await handler(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)


def create_role_app(info: OpsInfo, *, lifespan: Any = None) -> RoleApp:
    """A FastAPI app with the shared middleware, error handlers and ops endpoints."""
    app = RoleApp(
        title=f"nexus {info.role}",
        # Our own Prometheus metrics and structlog lines describe requests; FastAPI's
        # OpenTelemetry bridge would only add a per-request provider check (and its logs
        # record exception messages, which may quote input).
        telemetry={"tracing": False, "metrics": False, "logs": False},
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
    ROLE_RESTARTS.labels(info.role).set(restarts_from_env())
    return app
