"""Structured logs and Prometheus metrics.

Every log line carries `role` and, inside a request or job, `request_id`. Logs never carry
payloads, secrets or tokens: the access log writes the path without its query string, and
`redact_secrets` masks any event key that names a credential.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from prometheus_client import Counter, Gauge, Histogram

SENSITIVE_KEYS = frozenset(
    {
        "authorization",
        "cookie",
        "password",
        "secret",
        "token",
        "access_token",
        "refresh_token",
        "client_secret",
        "api_key",
        "body",
        "payload",
        "database_url",
    }
)
REDACTED = "[redacted]"

HTTP_REQUESTS = Counter(
    "nexus_http_requests_total",
    "HTTP requests served, by route template and status",
    ["role", "route", "method", "status"],
)
HTTP_LATENCY = Histogram(
    "nexus_http_request_duration_seconds",
    "HTTP request latency, by route template",
    ["role", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BUILD_INFO = Gauge("nexus_build_info", "Build of this process", ["version", "role"])
ROLE_RESTARTS = Gauge(
    "nexus_role_restarts",
    "Times `nexus up` restarted this role after it exited unexpectedly",
    ["role"],
)


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        lowered = key.lower()
        if lowered in SENSITIVE_KEYS or lowered.endswith(("_token", "_secret", "password")):
            event_dict[key] = REDACTED
    return event_dict


def configure_logging(*, role: str, level: str = "info", fmt: str = "auto") -> None:
    """Route structlog and stdlib logging (uvicorn, alembic, sqlalchemy) to one stream."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())

    def add_role(
        _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event_dict.setdefault("role", role)
        event_dict.pop("color_message", None)  # uvicorn's duplicate of the message
        return event_dict

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        add_role,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # drop below-level events before any work
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(), *shared],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if use_json else _identity,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # our middleware logs access
    # Libraries whose debug lines carry URLs, SQL parameters or tokens (authlib logs issued
    # tokens at DEBUG): they never log below WARNING, whatever the level asked for.
    for noisy in ("httpx", "httpcore", "authlib", "aiosqlite", "aiomysql", "sqlalchemy", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _identity(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    return event_dict


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
