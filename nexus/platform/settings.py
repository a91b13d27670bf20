"""Settings from `NEXUS_*` environment variables, one pydantic-settings model per concern.

`load_settings()` is the only constructor callers use: it builds every model, derives the
defaults that depend on one another (SQLite files under the var dir, loopback upstream URLs
from the port base) and turns a validation failure into `SettingsError`, whose message is a
single line naming the offending variable and never echoing a secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from nexus.contracts.roles import ROLE_PORT_OFFSET, LogicalService, Role

ENV_PREFIX = "NEXUS_"
SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "mysql+aiomysql")
MAX_PORT = 65535
TLS_PORT_OFFSET = 443
MIN_OPS_TOKEN_LENGTH = 32


class SettingsError(Exception):
    """A setting is invalid. The message is one line that names the variable."""


def _config() -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", case_sensitive=False)


class CoreSettings(BaseSettings):
    model_config = _config()

    env: Literal["development", "production"] = "development"
    var_dir: Path = Path("./var")
    host: str = "127.0.0.1"
    port_base: Annotated[int, Field(ge=1, le=MAX_PORT - len(ROLE_PORT_OFFSET))] = 8000
    public_base_url: str | None = None
    shutdown_grace_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    #: After SIGTERM a role keeps serving this long with /readyz answering 503 (so a load
    #: balancer stops sending it requests), then stops and drains for the grace period.
    shutdown_delay_seconds: Annotated[float, Field(ge=0, le=120)] = 0.0
    migrations_dir: Path | None = None
    #: The orgs whose work this process's workers claim (integration executors, the inbox,
    #: flows and imports; JSON list, e.g. `["00D..."]`); empty: every org's. Each org's work
    #: is its own family, so a tenant can have workers of its own (ADR 0067).
    work_orgs: list[str] = Field(default_factory=list)
    #: Testing only: crash the process at a named point (e.g. `metadata.after_ddl`).
    failpoint: str | None = None


class DatabaseSettings(BaseSettings):
    """One URL per logical service; unset means a SQLite file under the var dir."""

    model_config = _config()

    runtime_database_url: SecretStr | None = None
    catalog_database_url: SecretStr | None = None
    integration_database_url: SecretStr | None = None
    sqlite_busy_timeout_ms: Annotated[int, Field(ge=0, le=600_000)] = 5000
    #: SQLite's `PRAGMA synchronous` (WAL): NORMAL (shipped) keeps every commit through a
    #: process crash, and may lose the last commits on a power loss or kernel crash; FULL
    #: fsyncs the log on every commit and keeps them through those too (bench/RESULTS.md
    #: measures the cost).
    sqlite_synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    #: A serving role checkpoints its SQLite files' WALs on a thread this often, instead of
    #: in whichever COMMIT finds the WAL full (docs/adr/0057). 0: SQLite's own checkpoints.
    sqlite_checkpoint_interval_ms: Annotated[int, Field(ge=0, le=60_000)] = 500
    db_pool_size: Annotated[int, Field(ge=1, le=200)] = 10
    db_connect_timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 5.0
    #: MariaDB: a connection that holds a write transaction and sends nothing for this long
    #: is closed by the server and its transaction rolled back, so a frozen process (a
    #: paused VM, a stopped container) cannot keep row locks that no lease can take back.
    #: 0 disables. (MySQL and TiDB: not applied.)
    db_idle_write_transaction_timeout_seconds: Annotated[int, Field(ge=0, le=86_400)] = 60

    @field_validator("runtime_database_url", "catalog_database_url", "integration_database_url")
    @classmethod
    def _valid_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_database_url(value.get_secret_value())
        return value


class LogSettings(BaseSettings):
    model_config = _config()

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    #: How often a role recounts its work queues for the `nexus_work_*` gauges on /metrics.
    work_stats_interval_seconds: Annotated[float, Field(ge=0.1, le=300)] = 5.0

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class GatewaySettings(BaseSettings):
    model_config = _config()

    gateway_body_limit_bytes: Annotated[int, Field(ge=1024)] = 10 * 1024 * 1024
    #: The body limit of routes marked `large_bodies` in the route table (the dialect's Bulk
    #: API uploads: Salesforce takes up to 150 MB of CSV a job); their upstream streams them.
    gateway_large_body_limit_bytes: Annotated[int, Field(ge=1024)] = 150 * 1024 * 1024
    gateway_upstream_timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 30.0
    gateway_connect_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 3.0
    gateway_readiness_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 2.0
    #: HTTPS beside plain HTTP when a certificate and key are given (`nexus up` makes local
    #: ones); the port defaults to port base + 443 (8443).
    gateway_tls_port: Annotated[int, Field(ge=1, le=MAX_PORT)] | None = None
    gateway_tls_cert_file: Path | None = None
    gateway_tls_key_file: Path | None = None
    #: Where the static bundles of the route table live (`static = "frontend"` serves
    #: `<root>/frontend/dist`); default: the source tree, else the working directory.
    gateway_static_root: Path | None = None
    #: The bearer token that opens the gateway's own /metrics and /version (and each role's
    #: /version under /_roles) on its public port; unset: they answer 401 to everyone.
    gateway_ops_token: SecretStr | None = None

    @field_validator("gateway_ops_token")
    @classmethod
    def _strong_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_OPS_TOKEN_LENGTH:
            raise ValueError(
                f"must be at least {MIN_OPS_TOKEN_LENGTH} characters (openssl rand -hex 32)"
            )
        return value


class ApiSettings(BaseSettings):
    """The public API dialects (sfcrm): per-user daily request limit (`REQUEST_LIMIT_EXCEEDED`)."""

    model_config = _config()

    api_daily_request_limit: Annotated[int, Field(ge=1)] = 100_000
    #: How often an App service fetches its Catalog snapshot (its App's active release); 0: never.
    app_catalog_poll_seconds: Annotated[float, Field(ge=0, le=3600)] = 5.0


class ReleaseSettings(BaseSettings):
    """App releases (docs/adr/0034): runtime-api replicas acknowledging a prepared release,
    and Catalog's writer lease."""

    model_config = _config()

    #: This runtime-api replica's name in acknowledgements (default: host name and pid).
    runtime_replica_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    #: How often a replica records that it is alive and preloads a newly prepared release.
    runtime_replica_heartbeat_seconds: Annotated[float, Field(gt=0, le=60)] = 1.0
    #: A replica not heard from for this long is not waited for.
    runtime_replica_live_seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0
    #: RUNTIME_PREPARED waits this long for every live replica to acknowledge the release.
    catalog_replica_ack_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    #: A release job's writer lease on its org; renewed while a long step runs.
    catalog_writer_lease_seconds: Annotated[float, Field(ge=1, le=86_400)] = 300.0


class UpstreamSettings(BaseSettings):
    """Where the other roles listen; unset means loopback at port base + offset."""

    model_config = _config()

    runtime_api_url: str | None = None
    runtime_worker_url: str | None = None
    catalog_url: str | None = None
    integration_url: str | None = None
    app_sfcrm_url: str | None = None

    @field_validator("*")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value


class IdentitySettings(BaseSettings):
    """Identity: token lifetimes, lockout, and the security staleness SLO."""

    model_config = _config()

    #: Security SLO: logout, revocation, deactivation and client disabling take effect for
    #: every later request within this many seconds.
    max_security_staleness_seconds: Annotated[float, Field(gt=0, le=60)] = 5.0
    access_token_ttl_seconds: Annotated[int, Field(ge=60, le=86_400)] = 900
    session_ttl_seconds: Annotated[int, Field(ge=300, le=30 * 86_400)] = 12 * 3600
    refresh_token_ttl_seconds: Annotated[int, Field(ge=300, le=365 * 86_400)] = 30 * 86_400
    delegation_ttl_seconds: Annotated[int, Field(ge=1, le=60)] = 60
    login_max_failures: Annotated[int, Field(ge=1, le=100)] = 5
    login_lockout_seconds: Annotated[int, Field(ge=1, le=86_400)] = 900
    bootstrap_admin_password: SecretStr | None = None


class IntegrationSettings(BaseSettings):
    """Integration: webhook ingress (receipts, group commit), its pools, and the loops."""

    model_config = _config()

    #: Phase one runs one org per deployment: the org that owns this deployment's connector
    #: routes (route files may carry `org_id` instead).
    integration_org_id: Annotated[str, Field(pattern=r"^[0-9A-Za-z]{15,18}$")] | None = None
    #: Default max webhook body size when a route does not set `max_body_bytes`.
    ingress_max_body_bytes: Annotated[int, Field(ge=1, le=64 * 1024 * 1024)] = 1024 * 1024
    #: Bodies up to this size are stored in the receipt row; larger ones as a file reference.
    ingress_body_snapshot_bytes: Annotated[int, Field(ge=0, le=16 * 1024 * 1024)] = 256 * 1024
    #: Group commit: at most this many receipts per transaction ...
    ingress_batch_max_rows: Annotated[int, Field(ge=1, le=5000)] = 256
    #: ... gathered for at most this long after the first one arrived. 0: a batch is what
    #: queued while the previous one committed (lowest latency; ADR 0022).
    ingress_batch_window_ms: Annotated[float, Field(ge=0, le=100)] = 0.0
    #: Writer tasks committing batches concurrently (1 suits SQLite's single writer).
    ingress_writers: Annotated[int, Field(ge=1, le=32)] = 1
    #: Connections of the ingress pool, separate from the background-loop pool.
    ingress_pool_size: Annotated[int, Field(ge=1, le=200)] = 8
    loops_pool_size: Annotated[int, Field(ge=1, le=200)] = 4
    #: How long a resolved route (and its secrets) is reused before it is read again.
    ingress_route_cache_seconds: Annotated[float, Field(ge=0, le=300)] = 1.0
    #: How often Integration fetches its Catalog snapshot (connector routes of installed
    #: Apps, docs/adr/0033); 0 turns the fetch off (routes only by `apply-routes`).
    integration_catalog_poll_seconds: Annotated[float, Field(ge=0, le=3600)] = 5.0
    #: Retention (the `--loops=all` process): succeeded WorkItems and materialized receipts
    #: older than this are pruned; dead items, their events and receipts stay until replayed
    #: or purged. The loop runs every `..._interval_seconds`, `..._batch` rows a transaction.
    integration_retention_days: Annotated[float, Field(gt=0, le=3650)] = 7.0
    integration_retention_interval_seconds: Annotated[float, Field(ge=1, le=86_400)] = 600.0
    integration_retention_batch: Annotated[int, Field(ge=1, le=500)] = 500
    #: Receipt router (`--loops=all`): receipts claimed and materialized per transaction
    #: (64 -> 256 took a 500/s end-to-end run from p50 7.5 s to 0.9 s: at 64 the one router
    #: fell behind, bench/RESULTS.md 2026-11-30).
    integration_router_batch: Annotated[int, Field(ge=1, le=1000)] = 256
    #: How long a router's claim on receipts lasts before another router may take them.
    integration_router_lease_ms: Annotated[int, Field(ge=500, le=600_000)] = 30_000
    #: Routing attempts before a receipt whose routing keeps failing transiently is `failed`.
    integration_router_max_attempts: Annotated[int, Field(ge=1, le=100)] = 8
    #: Router tasks per process, and how often an idle one looks (ingress wakes it at once).
    integration_router_concurrency: Annotated[int, Field(ge=1, le=16)] = 1
    integration_router_idle_poll_ms: Annotated[int, Field(ge=10, le=60_000)] = 200
    #: Executor: commands in flight per process (coalesced into AcceptCommand batches of at
    #: most this many; 32 -> 256 took a 500/s end-to-end run from 172 to 246 records/s,
    #: bench/RESULTS.md), and items claimed per batch.
    integration_executor_concurrency: Annotated[int, Field(ge=1, le=1024)] = 256
    integration_executor_batch: Annotated[int, Field(ge=1, le=1000)] = 256
    integration_executor_lease_ms: Annotated[int, Field(ge=1000, le=600_000)] = 30_000
    #: Delivery attempts of a command (for work queues created from now on) before it is dead.
    integration_executor_max_attempts: Annotated[int, Field(ge=1, le=100)] = 10
    #: (The routers in this process hand the executor their new work in their own
    #: transaction, ADR 0059; this bounds the delay for work routed by another process.)
    integration_executor_idle_poll_ms: Annotated[int, Field(ge=10, le=60_000)] = 250
    #: Retry backoff of a command Runtime did not take: full jitter under base * 2^(attempt-1),
    #: capped (Runtime down for a while: items wait at most the cap between attempts).
    integration_executor_backoff_base_ms: Annotated[int, Field(ge=1, le=3_600_000)] = 1_000
    integration_executor_backoff_cap_ms: Annotated[int, Field(ge=1, le=86_400_000)] = 300_000
    #: Timeout of one AcceptCommand call (the deadline header says the same).
    integration_executor_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    #: Circuit breaker to Runtime (`platform.breaker`): this many consecutive calls that
    #: reached nothing (refused, connect timeout, 503, no answer) open it; while open no
    #: command is sent or claimed (deferred, no attempt spent) and a probe goes after the open
    #: time, which doubles per failed probe up to the cap.
    integration_executor_breaker_failures: Annotated[int, Field(ge=1, le=1000)] = 3
    integration_executor_breaker_open_ms: Annotated[int, Field(ge=10, le=600_000)] = 1_000
    integration_executor_breaker_open_cap_ms: Annotated[int, Field(ge=10, le=3_600_000)] = 30_000


class OutboxSettings(BaseSettings):
    """runtime-worker's outbox: after-save record actions and outbound webhooks."""

    model_config = _config()

    #: Attempts per item before it is dead (set on the queue when runtime-worker starts).
    outbox_max_attempts: Annotated[int, Field(ge=1, le=100)] = 10
    #: Retry backoff: full jitter under base * 2^(attempt-1), capped.
    outbox_backoff_base_ms: Annotated[int, Field(ge=1, le=3_600_000)] = 5_000
    outbox_backoff_cap_ms: Annotated[int, Field(ge=1, le=86_400_000)] = 3_600_000
    #: A webhook receiver gets this long to answer (connect included).
    outbox_webhook_timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 10.0
    #: Items executed at once by one runtime-worker process.
    outbox_concurrency: Annotated[int, Field(ge=1, le=1000)] = 32


class InboxSettings(BaseSettings):
    """Runtime's command inbox: AcceptCommand admission and runtime-worker's inbox loop."""

    model_config = _config()

    #: AcceptCommand request bodies above this are refused with 413.
    command_max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 256 * 1024
    #: Commands runtime-worker holds at once; those ready together run as one group
    #: transaction of up to 64 (ADR 0028), so this is also the largest group.
    inbox_concurrency: Annotated[int, Field(ge=1, le=256)] = 64
    #: Lease of a claimed command; renewed every third of it while it runs.
    inbox_lease_ms: Annotated[int, Field(ge=1000, le=600_000)] = 30_000
    #: Attempts before a command that keeps failing transiently is dead.
    inbox_max_attempts: Annotated[int, Field(ge=1, le=100)] = 8
    #: How often an idle inbox looks for commands. runtime-api rings runtime-worker's
    #: doorbell after each accept (docs/adr/0032), so this only bounds a lost bell's delay.
    inbox_idle_poll_ms: Annotated[int, Field(ge=10, le=60_000)] = 250
    #: Finished inbox and outbox items, the inbox's message-key dedupe rows and records'
    #: idempotency keys older than this are pruned by runtime-worker (dead items are kept);
    #: a message redelivered after this long is no longer recognised as a duplicate.
    runtime_retention_days: Annotated[float, Field(gt=0, le=3650)] = 7.0
    runtime_retention_interval_seconds: Annotated[float, Field(ge=1, le=86_400)] = 600.0
    #: A pause between an import's chunks (ADR 0040); for tests that watch an import's
    #: progress step by step on a fast machine. 0 (no pause) outside tests.
    import_chunk_pause_ms: Annotated[int, Field(ge=0, le=10_000)] = 0


SETTINGS_MODELS: tuple[type[BaseSettings], ...] = (
    CoreSettings,
    DatabaseSettings,
    LogSettings,
    GatewaySettings,
    ApiSettings,
    ReleaseSettings,
    UpstreamSettings,
    IdentitySettings,
    IntegrationSettings,
    OutboxSettings,
    InboxSettings,
)


def env_var_names() -> set[str]:
    """Every environment variable the settings models read."""
    return {
        f"{ENV_PREFIX}{name}".upper() for model in SETTINGS_MODELS for name in model.model_fields
    }


@dataclass(frozen=True)
class Settings:
    core: CoreSettings
    db: DatabaseSettings
    log: LogSettings
    gateway: GatewaySettings
    upstreams: UpstreamSettings
    identity: IdentitySettings
    integration: IntegrationSettings
    outbox: OutboxSettings
    inbox: InboxSettings
    api: ApiSettings
    releases: ReleaseSettings

    @property
    def var_dir(self) -> Path:
        return self.core.var_dir

    def port_for(self, role: Role) -> int:
        return self.core.port_base + ROLE_PORT_OFFSET[role]

    @property
    def gateway_tls_port(self) -> int:
        return self.gateway.gateway_tls_port or self.core.port_base + TLS_PORT_OFFSET

    @property
    def public_base_url(self) -> str:
        return self.core.public_base_url or f"http://{self.core.host}:{self.core.port_base}"

    def database_url(self, service: LogicalService) -> str:
        """The service's SQLAlchemy URL. Contains credentials: never log it."""
        configured: SecretStr | None = getattr(self.db, f"{service.value}_database_url")
        if configured is not None:
            return configured.get_secret_value()
        path = (self.core.var_dir / f"{service.value}.sqlite3").resolve()
        return f"sqlite+aiosqlite:///{path}"

    def upstream_url(self, name: str) -> str:
        """Base URL of an upstream by its route-table name (`runtime-api`, `app:sfcrm`)."""
        field = name.replace(":", "_").replace("-", "_") + "_url"
        if field not in UpstreamSettings.model_fields:
            raise KeyError(f"unknown upstream {name!r}")
        configured: str | None = getattr(self.upstreams, field)
        if configured:
            return configured
        role = Role.APP if name.startswith("app:") else Role(name)
        host = "127.0.0.1" if self.core.host in ("0.0.0.0", "::") else self.core.host
        return f"http://{host}:{self.port_for(role)}"


def parse_database_url(raw: str) -> URL:
    """Parse and check a database URL; errors never echo the URL (it may hold a password)."""
    try:
        url = make_url(raw)
    except (ArgumentError, ValueError):
        raise ValueError(
            "malformed database URL (expected sqlite+aiosqlite:///PATH or "
            "mysql+aiomysql://USER:PASSWORD@HOST:PORT/DATABASE)"
        ) from None
    if url.drivername not in SUPPORTED_DRIVERS:
        raise ValueError(
            f"unsupported database driver {url.drivername!r} "
            f"(supported: {', '.join(SUPPORTED_DRIVERS)})"
        )
    if url.drivername.startswith("sqlite") and not url.database:
        raise ValueError("a SQLite URL needs a file path")
    if url.drivername.startswith("mysql") and not (url.host and url.database):
        raise ValueError("a MySQL URL needs a host and a database name")
    return url


def _describe(error: ValidationError, model: type[BaseSettings]) -> str:
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    name = f"{ENV_PREFIX}{field}".upper() if field in model.model_fields else ENV_PREFIX + "*"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{name}: {message}"


M = TypeVar("M", bound=BaseSettings)


def _build(model: type[M], overrides: dict[str, Any]) -> M:
    kwargs = {k: v for k, v in overrides.items() if k in model.model_fields}
    try:
        return model(**kwargs)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, model)) from None


def load_settings(**overrides: Any) -> Settings:
    """Build every settings model from the environment (plus explicit overrides, for tests)."""
    return Settings(
        core=_build(CoreSettings, overrides),
        db=_build(DatabaseSettings, overrides),
        log=_build(LogSettings, overrides),
        gateway=_build(GatewaySettings, overrides),
        upstreams=_build(UpstreamSettings, overrides),
        identity=_build(IdentitySettings, overrides),
        integration=_build(IntegrationSettings, overrides),
        outbox=_build(OutboxSettings, overrides),
        inbox=_build(InboxSettings, overrides),
        api=_build(ApiSettings, overrides),
        releases=_build(ReleaseSettings, overrides),
    )
