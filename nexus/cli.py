"""The composition root: `nexus serve`, `nexus up`, `nexus migrate`.

Only this module composes roles. Usage errors and invalid settings print exactly one line,
`nexus: error: ...`, and exit with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import httpx

from nexus import __version__
from nexus.contracts.roles import KNOWN_APPS, ROLE_SERVICE, LogicalService, Role, upstream_name
from nexus.platform.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

    from nexus.platform.supervisor import Supervisor

T = TypeVar("T")

EXIT_USAGE = 2
EXIT_FAILURE = 1
READY_POLL_SECONDS = 0.25


class CliError(Exception):
    """A one-line, user-facing error; `code` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(message)


# ---------------------------------------------------------------------------- composition


def build_app(
    settings: Settings,
    role: Role,
    app_name: str | None = None,
    *,
    loops: str = "all",
    address: tuple[str, int] | None = None,
) -> object:
    """The ASGI app of one role (`address`: where it serves, for its doorbell). Imports stay
    local: a process loads only its own role."""
    if role is Role.GATEWAY:
        from nexus.gateway.app import create_app as gateway_app

        return gateway_app(settings)
    if role is Role.RUNTIME_API:
        from nexus.runtime.app import create_api_app

        return create_api_app(settings)
    if role is Role.RUNTIME_WORKER:
        from nexus.runtime.app import create_worker_app

        return create_worker_app(settings, doorbell_at=address)
    if role is Role.CATALOG:
        from nexus.catalog.app import create_app as catalog_app

        return catalog_app(settings)
    if role is Role.INTEGRATION:
        from nexus.integration.app import create_app as integration_app

        return integration_app(settings, loops="none" if loops == "none" else "all")
    if app_name == "sfcrm":
        from nexus.apps.sfcrm.app import create_app as sfcrm_app

        return sfcrm_app(settings)
    raise CliError(f"unknown app {app_name!r} (known: {', '.join(KNOWN_APPS)})")


# ---------------------------------------------------------------------------- serve


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket ourselves, so an occupied port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CliError(f"port {port} on {host} is already in use") from None
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES):
            raise CliError(f"cannot listen on {host}:{port} ({exc.strerror})") from None
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _role_and_app(role_value: str, app: str | None) -> tuple[Role, str | None]:
    try:
        role = Role(role_value)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise CliError(f"unknown role {role_value!r} (known: {known})") from None
    if role is Role.APP:
        app = app or KNOWN_APPS[0]
        if app not in KNOWN_APPS:
            raise CliError(f"unknown app {app!r} (known: {', '.join(KNOWN_APPS)})")
        return role, app
    if app is not None:
        raise CliError("--app is only valid with --role=app")
    return role, None


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from nexus.platform import sqlite_checkpoints
    from nexus.platform.observability import configure_logging, get_logger
    from nexus.platform.secrets import workload_signer
    from nexus.platform.serving import DrainingServer, server_config
    from nexus.platform.supervisor import die_with_supervisor

    role, app_name = _role_and_app(args.role, args.app)
    if args.loops is not None and role is not Role.INTEGRATION:
        raise CliError("--loops is only valid with --role=integration")
    settings = load_settings()
    sqlite_checkpoints.enable(settings.db.sqlite_checkpoint_interval_ms / 1000)
    configure_logging(role=role.value, level=settings.log.log_level, fmt=settings.log.log_format)
    host = args.host or settings.core.host
    port = args.port if args.port is not None else settings.port_for(role)
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    die_with_supervisor()
    sock = bind_socket(host, port)
    workload_signer(settings, _child_name(role, app_name))  # production: must be provisioned
    app = build_app(settings, role, app_name, loops=args.loops or "all", address=(host, port))
    config = server_config(app, timeout_graceful_shutdown=int(settings.core.shutdown_grace_seconds))
    server = DrainingServer(config, delay_seconds=settings.core.shutdown_delay_seconds)
    get_logger("nexus.serve").info(
        "role.starting", version=__version__, app=app_name, host=host, port=port
    )
    # uvicorn drains on SIGTERM/SIGINT, then re-raises the signal through the handler that
    # was installed before it started: make that a no-op so a drained stop exits 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: None)
    tls = _gateway_tls(settings, role, host)
    if tls is None:
        server.run(sockets=[sock])
    else:
        from nexus.platform.serving import serve_with_tls

        grace = int(settings.core.shutdown_grace_seconds)
        tls_options = {"lifespan": "off", "timeout_graceful_shutdown": grace, **tls[1]}
        tls_server = uvicorn.Server(server_config(app, **tls_options))
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(serve_with_tls(server, sock, tls_server, tls[0]))
    if not server.started:
        return EXIT_FAILURE
    get_logger("nexus.serve").info("role.stopped")
    return 0


def _gateway_tls(
    settings: Settings, role: Role, host: str
) -> tuple[socket.socket, dict[str, str]] | None:
    """The gateway's HTTPS socket and uvicorn TLS options, when a certificate and key are set."""
    gw = settings.gateway
    if role is not Role.GATEWAY or gw.gateway_tls_cert_file is None:
        return None
    if gw.gateway_tls_key_file is None:
        raise CliError("NEXUS_GATEWAY_TLS_CERT_FILE needs NEXUS_GATEWAY_TLS_KEY_FILE")
    for path in (gw.gateway_tls_cert_file, gw.gateway_tls_key_file):
        if not path.is_file():
            raise CliError(f"no TLS file at {path}")
    options = {"ssl_certfile": str(gw.gateway_tls_cert_file)}
    options["ssl_keyfile"] = str(gw.gateway_tls_key_file)
    return bind_socket(host, settings.gateway_tls_port), options


# ---------------------------------------------------------------------------- migrate


@asynccontextmanager
async def _service_engine(
    settings: Settings, service: LogicalService, application_name: str
) -> AsyncIterator[AsyncEngine]:
    """An engine on one service's database for one command, disposed at the end."""
    from nexus.platform.db import create_engine

    engine = create_engine(
        settings.database_url(service),
        application_name=application_name,
        sqlite_busy_timeout_ms=settings.db.sqlite_busy_timeout_ms,
        connect_timeout_seconds=settings.db.db_connect_timeout_seconds,
        idle_write_transaction_timeout_seconds=settings.db.db_idle_write_transaction_timeout_seconds,
    )
    try:
        yield engine
    finally:
        await engine.dispose()


async def _migrate(settings: Settings, services: Sequence[LogicalService]) -> list[str]:
    from nexus.platform.migrations import upgrade_to_head

    lines = []
    for service in services:
        async with _service_engine(settings, service, "nexus-migrate") as engine:
            try:
                state = await upgrade_to_head(engine, service)
            except Exception as exc:  # noqa: BLE001  (every failure becomes one clear line)
                raise CliError(
                    f"{service.value}: migration failed ({type(exc).__name__}: {_safe(exc)})",
                    EXIT_FAILURE,
                ) from None
        lines.append(f"{service.value}: {state.describe()}")
    return lines


def _safe(exc: Exception) -> str:
    """The first line of a driver error; driver messages never contain the password."""
    return str(exc).splitlines()[0][:200] if str(exc) else ""


#: How often `--wait` commands try again while what they need does not answer yet.
WAIT_RETRY_SECONDS = 2.0


async def _wait_for_databases(
    settings: Settings, services: Sequence[LogicalService], wait_seconds: float
) -> None:
    """Return once every service's database answers; CliError after `wait_seconds`."""
    from nexus.platform.db import ping

    deadline = time.monotonic() + wait_seconds
    for service in services:
        async with _service_engine(settings, service, "nexus-migrate") as engine:
            while True:
                try:
                    await ping(engine)
                    break
                except Exception as exc:  # noqa: BLE001  (any failure to answer: try again)
                    reason = f"{type(exc).__name__}: {_safe(exc)}"
                    if time.monotonic() >= deadline:
                        raise CliError(
                            f"{service.value}: the database did not answer within "
                            f"{wait_seconds:g}s ({reason})",
                            EXIT_FAILURE,
                        ) from None
                    print(
                        f"nexus: waiting for the {service.value} database ({reason})",
                        file=sys.stderr,
                        flush=True,
                    )
                    await asyncio.sleep(WAIT_RETRY_SECONDS)


def cmd_migrate(args: argparse.Namespace) -> int:
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="migrate", level="warning", fmt=settings.log.log_format)
    services = [LogicalService(args.service)] if args.service else list(LogicalService)
    settings.var_dir.mkdir(parents=True, exist_ok=True)

    async def run() -> list[str]:
        if args.wait > 0:
            await _wait_for_databases(settings, services, args.wait)
        return await _migrate(settings, services)

    for line in asyncio.run(run()):
        print(line)
    return 0


def cmd_healthcheck(args: argparse.Namespace) -> int:
    """Exit 0 when a role on this host answers /healthz (or /readyz) with 200: for container
    healthchecks, which should not depend on curl being in the image."""
    settings = load_settings()
    port = args.port if args.port is not None else settings.port_for(Role(args.role))
    url = f"http://{args.host}:{port}/{'readyz' if args.ready else 'healthz'}"
    try:
        status = httpx.get(url, timeout=args.timeout, trust_env=False).status_code
    except httpx.HTTPError as exc:
        print(f"{url}: {type(exc).__name__}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{url}: {status}")
    return 0 if status == 200 else EXIT_FAILURE


def cmd_makemigration(args: argparse.Namespace) -> int:
    from nexus.platform.migrations import new_revision

    path = new_revision(LogicalService(args.service), args.message)
    print(path)
    return 0


# ---------------------------------------------------------------------------- up

#: Start order of `nexus up`; the gateway starts last and stops first.
STACK: tuple[tuple[Role, str | None], ...] = (
    (Role.RUNTIME_API, None),
    (Role.RUNTIME_WORKER, None),
    (Role.CATALOG, None),
    (Role.INTEGRATION, None),
    (Role.APP, "sfcrm"),
    (Role.GATEWAY, None),
)


def cmd_up(args: argparse.Namespace) -> int:
    from nexus.platform.observability import configure_logging, get_logger
    from nexus.platform.secrets import ensure_local_secrets
    from nexus.platform.supervisor import Child, GaveUp, Supervisor

    settings = load_settings()
    configure_logging(role="up", level=settings.log.log_level, fmt=settings.log.log_format)
    log = get_logger("nexus.up")
    var_dir = settings.var_dir.resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
    for role, _ in STACK:
        bind_socket(settings.core.host, settings.port_for(role)).close()
    bind_socket(settings.core.host, settings.gateway_tls_port).close()
    ensure_local_secrets(var_dir, [_child_name(role, app) for role, app in STACK])
    tls_env, ca_file = _local_tls(settings, var_dir)
    services = sorted({s for s in ROLE_SERVICE.values() if s is not None})
    for line in asyncio.run(_migrate(settings, services)):
        log.info("migrate.done", state=line)
    _announce_admin(asyncio.run(_bootstrap_admin(settings)))

    stop_signal: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: stop_signal.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop_signal.append(signum))
    supervisor = Supervisor(
        log_dir=var_dir / "logs", env=dict(os.environ, NEXUS_VAR_DIR=str(var_dir), **tls_env)
    )
    supervisor.start(
        [Child(name=_child_name(role, app), argv=_serve_argv(role, app)) for role, app in STACK]
    )
    code = 0
    try:
        url = f"http://{settings.core.host}:{settings.port_for(Role.GATEWAY)}"
        if _wait_until_ready(supervisor, url, args.ready_timeout, stop_signal, var_dir):
            _install_builtin_apps(settings)
            # the Catalog console quiets logging to errors: the supervisor's events stay visible
            configure_logging(role="up", level=settings.log.log_level, fmt=settings.log.log_format)
            tls_url = f"https://{settings.core.host}:{settings.gateway_tls_port}"
            print(f"HTTPS at {tls_url}  (CA: {ca_file or 'your own'})", flush=True)
            print(f"Nexus is ready at {url}  (Ctrl-C to stop)", flush=True)
        while not stop_signal:
            for event in supervisor.watch():
                if event.started:
                    log.warning(
                        "stack.role_restarted",
                        child=event.child.name,
                        pid=event.child.pid,
                        restarts=event.child.restarts,
                    )
                else:
                    log.warning(
                        "stack.role_exited",
                        child=event.child.name,
                        exit_code=event.exit_code,
                        restart_in_seconds=event.delay,
                    )
            time.sleep(READY_POLL_SECONDS)
    except GaveUp as exc:
        print(f"nexus: error: {exc}; stopping the stack", file=sys.stderr, flush=True)
        code = EXIT_FAILURE
    except CliError as exc:
        print(f"nexus: error: {exc}", file=sys.stderr, flush=True)
        code = exc.code
    finally:
        supervisor.stop(
            grace_seconds=settings.core.shutdown_grace_seconds + 5,
            order=lambda child: 0 if child.name == Role.GATEWAY.value else 1,
        )
        log.info("stack.stopped")
    return code


def _local_tls(settings: Settings, var_dir: Path) -> tuple[dict[str, str], Path | None]:
    """The gateway's certificate settings: the configured ones, or a local CA's certificate
    (made on first start); and the CA file clients trust (None for a configured certificate)."""
    from nexus.platform.tls import ensure_local_tls

    if settings.gateway.gateway_tls_cert_file is not None:
        return {}, None
    files = ensure_local_tls(var_dir)
    env = {"NEXUS_GATEWAY_TLS_CERT_FILE": str(files.cert)}
    env["NEXUS_GATEWAY_TLS_KEY_FILE"] = str(files.key)
    return env, files.ca_cert


def _child_name(role: Role, app: str | None) -> str:
    return upstream_name(role, app).replace(":", "-")


def _serve_argv(role: Role, app: str | None) -> list[str]:
    argv = [sys.executable, "-m", "nexus", "serve", f"--role={role.value}"]
    return [*argv, f"--app={app}"] if app else argv


def _wait_until_ready(
    supervisor: Supervisor, url: str, timeout: float, stop_signal: list[int], var_dir: Path
) -> bool:
    """Poll the gateway's /readyz until 200; False when a stop signal came first."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while not stop_signal:
            dead = supervisor.first_exited()
            if dead is not None:
                raise CliError(f"role {dead.name} exited during start-up", EXIT_FAILURE)
            if time.monotonic() > deadline:
                raise CliError(
                    f"the stack was not ready within {timeout:g}s (see {var_dir / 'logs'})",
                    EXIT_FAILURE,
                )
            try:
                if client.get(f"{url}/readyz").status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(READY_POLL_SECONDS)
    return False


# ---------------------------------------------------------------------------- identity admin


@asynccontextmanager
async def _runtime_sessions(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    from nexus.platform.db import session_factory

    async with _service_engine(settings, LogicalService.RUNTIME, "nexus-admin") as engine:
        yield session_factory(engine)


async def _bootstrap_admin(settings: Settings) -> tuple[str, str | None] | None:
    """On an empty database: org, first admin, and the `integration` workload's run-as user;
    on every start: the browser CRM's public client, redirecting to this gateway."""
    from nexus.identity.setup import bootstrap_first_admin, ensure_web_client
    from nexus.runtime.inbox.bindings import bootstrap_integration_binding

    configured = settings.identity.bootstrap_admin_password
    async with _runtime_sessions(settings) as sessions:
        created = await bootstrap_first_admin(
            sessions, password=configured.get_secret_value() if configured else None
        )
        if created is not None:
            await bootstrap_integration_binding(sessions)
        await ensure_web_client(sessions, origins=_web_origins(settings))
        return created


def _web_origins(settings: Settings) -> list[str]:
    """The origins a browser reaches this gateway at (the browser CRM's redirect URIs)."""
    host, port = settings.core.host, settings.port_for(Role.GATEWAY)
    hosts = {host, "localhost", "127.0.0.1"} if host in ("127.0.0.1", "localhost") else {host}
    origins = [settings.public_base_url]
    for name in sorted(hosts):
        origins += [f"http://{name}:{port}", f"https://{name}:{settings.gateway_tls_port}"]
    return origins


def _announce_admin(created: tuple[str, str | None] | None) -> None:
    """Print (never log) the first admin's generated password, once."""
    if created is None:
        return
    username, generated = created
    if generated is None:
        print(f"Created user {username!r} with the password from NEXUS_BOOTSTRAP_ADMIN_PASSWORD.")
    else:
        print(f"Created user {username!r} with password: {generated}")
        print("  (shown once, not logged: store it now)", flush=True)
    print(
        "Webhook commands run as user 'integration' (no permission sets yet: "
        "nexus admin assign-permission-set --username integration ...)",
        flush=True,
    )


def _admin(args: argparse.Namespace, action: Callable[..., Awaitable[T]], **kwargs: Any) -> T:
    from nexus.contracts.errors import NexusError
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="admin", level="warning", fmt=settings.log.log_format)

    async def run() -> T:
        async with _runtime_sessions(settings) as sessions:
            return await action(sessions, **kwargs)

    try:
        return asyncio.run(run())
    except NexusError as exc:
        raise CliError(exc.message, EXIT_FAILURE) from None


def cmd_admin_create_user(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    created = _admin(
        args,
        admin.create_user,
        username=args.username,
        password=password,
        email=args.email,
        display_name=args.display_name,
        is_admin=args.admin,
        role=args.role,
    )
    print(f"user_id: {created.user_id}")
    print(f"username: {created.username}")
    if created.generated_password:
        print(f"password: {created.generated_password}  (shown once)")
    return 0


def cmd_admin_create_client(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    created = _admin(
        args,
        admin.create_client,
        name=args.name,
        redirect_uris=args.redirect_uri or [],
        grant_types=args.grant_type,
        scopes=args.scope,
        run_as_username=args.run_as,
        public=args.public,
    )
    print(f"client_id: {created.client_id}")
    if created.client_secret:
        print(f"client_secret: {created.client_secret}  (shown once; only its hash is stored)")
    return 0


def cmd_admin_revoke_user(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    revoked = _admin(args, admin.revoke_user, username=args.username, deactivate=args.deactivate)
    print(
        "user deactivated; every session revoked"
        if args.deactivate
        else f"sessions revoked: {revoked}"
    )
    return 0


def cmd_admin_bootstrap(args: argparse.Namespace) -> int:
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="admin", level="warning", fmt=settings.log.log_format)
    created = asyncio.run(_bootstrap_admin(settings))
    if created is None:
        print("users exist already; nothing to do")
    _announce_admin(created)
    return 0


def cmd_admin_create_role(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    role_id = _admin(args, admin.create_role, name=args.name, parent=args.parent)
    print(f"role_id: {role_id}")
    return 0


def cmd_admin_assign(args: argparse.Namespace) -> int:
    from nexus.identity.errors import UnknownUser
    from nexus.identity.repository import IdentityRepository
    from nexus.platform.db import unit_of_work
    from nexus.runtime.assignments import assign_permission_set

    async def assign(sessions: async_sessionmaker[AsyncSession]) -> None:
        async with unit_of_work(sessions) as session:
            user = await IdentityRepository(session).user_by_username(args.username)
            if user is None:
                raise UnknownUser(f"no user {args.username!r}")
            await assign_permission_set(
                session,
                org_id=user["org_id"],
                user_id=user["user_id"],
                permission_set=args.permission_set,
                assigned=not args.remove,
            )

    _admin(args, assign)
    print("removed" if args.remove else "assigned")
    return 0


def cmd_admin_list_clients(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    for client in _admin(args, admin.list_clients):
        state = "enabled" if client["enabled"] else "disabled"
        kind = "public" if client["public"] else "confidential"
        grants = ",".join(client["grant_types"])  # type: ignore[arg-type]  # list of str
        print(f"{client['client_id']}  {state:8}  {kind:12}  {grants}  {client['name']}")
    return 0


def cmd_admin_disable_client(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    _admin(args, admin.disable_client, client_id=args.client_id)
    print("connected app disabled; its sessions are revoked")
    return 0


def cmd_admin_bind_workload(args: argparse.Namespace) -> int:
    from nexus.runtime.inbox.bindings import bind_workload

    _admin(args, bind_workload, workload=args.workload, username=args.username)
    print(f"workload {args.workload}: commands run as {args.username.strip().lower()}")
    return 0


def cmd_admin_unbind_workload(args: argparse.Namespace) -> int:
    from nexus.runtime.inbox.bindings import unbind_workload

    _admin(args, unbind_workload, workload=args.workload)
    print(f"workload {args.workload}: unbound (its commands are refused)")
    return 0


def cmd_admin_list_bindings(args: argparse.Namespace) -> int:
    from nexus.runtime.inbox.bindings import list_bindings

    for row in _admin(args, list_bindings):
        state = "" if row["is_active"] else "  (inactive: commands refused)"
        print(f"{row['workload']}  {row['username']}  {row['user_id']}{state}")
    return 0


def cmd_admin_init_secrets(args: argparse.Namespace) -> int:
    """Each role's secrets directory for deployments without `nexus up` (docs/adr/0060)."""
    from nexus.identity.keys import ensure_key, key_dir
    from nexus.platform.secrets import chown_tree, provision_role_secrets

    known = [_child_name(role, app) for role, app in STACK]
    chosen = list(dict.fromkeys(args.role or known))
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise CliError(f"unknown role {unknown[0]!r} (known: {', '.join(known)})")
    owner = _owner(args.owner) if args.owner else None
    root = Path(args.dir)
    written = provision_role_secrets(root, chosen)
    runtime = _child_name(Role.RUNTIME_API, None)
    if runtime in chosen and ensure_key(key_dir(root / runtime)):
        written.setdefault(runtime, []).append("identity-keys/ (the first signing key)")
    if owner is not None:
        for name in chosen:
            chown_tree(root / name, *owner)
    for name in sorted(written):
        print(f"{root / name}: {', '.join(written[name]) or 'up to date'}")
    return 0


def _owner(raw: str) -> tuple[int, int]:
    uid, _, gid = raw.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise CliError(f"--owner takes numeric UID:GID, not {raw!r}")
    return int(uid), int(gid)


def cmd_admin_rotate_keys(args: argparse.Namespace) -> int:
    from nexus.identity.keys import generate_key, key_dir
    from nexus.platform.secrets import secrets_dir

    settings = load_settings()
    kid = generate_key(key_dir(secrets_dir(settings.var_dir)))
    print(f"new signing key: {kid} (older keys keep verifying until their tokens expire)")
    return 0


def _with_org_connection(args: argparse.Namespace, action: Callable[..., Awaitable[T]]) -> T:
    """Run `action(conn, org_id=...)` in one unit of work on Runtime's database."""
    from nexus.identity.repository import IdentityRepository
    from nexus.platform.db import unit_of_work

    async def run(sessions: async_sessionmaker[AsyncSession]) -> T:
        async with unit_of_work(sessions) as session:
            org = None if args.org_id else await IdentityRepository(session).first_org()
            org_id = args.org_id or (org["org_id"] if org else None)
            if not org_id:
                raise CliError("no org yet: run `nexus up` or `nexus admin bootstrap` first", 1)
            return await action(await session.connection(), org_id=org_id)

    return _admin(args, run)


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def cmd_admin_set_outbound_endpoint(args: argparse.Namespace) -> int:
    from functools import partial

    from nexus.platform.secrets import WebhookSecretMissing, read_webhook_secret
    from nexus.runtime.outbox.bindings import set_endpoint

    created = _with_org_connection(
        args,
        partial(
            set_endpoint, name=args.name, url=args.url, secret_ref=args.secret_ref, actor=_actor()
        ),
    )
    print(f"outbound endpoint {args.name}: {'created' if created else 'updated'} (active)")
    try:
        read_webhook_secret(load_settings().var_dir, args.secret_ref)
    except WebhookSecretMissing:
        print(
            f"note: secret {args.secret_ref!r} is not provisioned yet: run "
            f"`nexus hooks set-secret {args.secret_ref} --generate` (deliveries fail until then)"
        )
    return 0


def cmd_admin_list_outbound_endpoints(args: argparse.Namespace) -> int:
    from nexus.runtime.outbox.bindings import display_url, list_endpoints

    endpoints = _with_org_connection(args, list_endpoints)
    for endpoint in endpoints:
        state = "active" if endpoint.active else "disabled"
        print(
            f"{endpoint.name}  {state:8}  secret:{endpoint.secret_ref}  {display_url(endpoint.url)}"
        )
    if not endpoints:
        print("no outbound endpoints")
    return 0


def cmd_admin_disable_outbound_endpoint(args: argparse.Namespace) -> int:
    from functools import partial

    from nexus.runtime.outbox.bindings import disable_endpoint

    _with_org_connection(args, partial(disable_endpoint, name=args.name, actor=_actor()))
    print(f"outbound endpoint {args.name}: disabled (its deliveries go to the dead letters)")
    return 0


# ---------------------------------------------------------------------------- metadata


def cmd_metadata_apply(args: argparse.Namespace) -> int:
    import yaml

    from nexus.contracts.errors import NexusError
    from nexus.platform.observability import configure_logging
    from nexus.runtime.metadata.definitions import InvalidMetadata
    from nexus.runtime.metadata.service import apply_metadata

    settings = load_settings()
    configure_logging(role="metadata", level="warning", fmt=settings.log.log_format)
    try:
        raw = yaml.safe_load(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(f"cannot read {args.file}: {type(exc).__name__}: {_safe(exc)}") from None

    async def run() -> Any:
        async with _service_engine(settings, LogicalService.RUNTIME, "nexus-metadata") as engine:
            org_id = args.org_id or await _first_org_id(engine)
            return await apply_metadata(
                engine, org_id=org_id, raw=raw, failpoint=settings.core.failpoint
            )

    try:
        result = asyncio.run(run())
    except InvalidMetadata as exc:
        for problem in exc.problems:
            print(f"{args.file}: {problem.path}: {problem.message}", file=sys.stderr)
        raise CliError(
            f"{len(exc.problems)} problem(s); nothing was applied", EXIT_FAILURE
        ) from None
    except NexusError as exc:
        raise CliError(exc.message, EXIT_FAILURE) from None
    for version in result.versions:
        print(f"{version['kind']} {version['name']}: version {version['version']}")
    for name in result.unchanged:
        print(f"object {name}: unchanged")
    print(f"schema generation {result.schema_generation}", end=", ")
    print(f"metadata revision {result.metadata_revision}")
    return 0


async def _first_org_id(engine: AsyncEngine) -> str:
    from nexus.identity.repository import IdentityRepository
    from nexus.platform.db import session_factory, unit_of_work

    async with unit_of_work(session_factory(engine), readonly=True) as session:
        org = await IdentityRepository(session).first_org()
    if org is None:
        raise CliError("no org yet: run `nexus up` or `nexus admin bootstrap` first", EXIT_FAILURE)
    return str(org["org_id"])


def cmd_metadata_resume(args: argparse.Namespace) -> int:
    from nexus.runtime.metadata.service import resume_staged

    settings = load_settings()

    async def run() -> list[str]:
        async with _service_engine(settings, LogicalService.RUNTIME, "nexus-metadata") as engine:
            return await resume_staged(engine)

    done = asyncio.run(run())
    print(f"completed {len(done)} staged metadata apply(s)")
    return 0


def cmd_metadata_reindex(args: argparse.Namespace) -> int:
    """Rebuild the search index from the record tables, one object per transaction."""
    from nexus.platform.db import session_factory, unit_of_work
    from nexus.runtime.metadata.view import MetadataCache
    from nexus.runtime.search.index import rebuild_index

    settings = load_settings()

    async def run() -> dict[str, int]:
        async with _service_engine(settings, LogicalService.RUNTIME, "nexus-metadata") as engine:
            org_id = args.org_id or await _first_org_id(engine)
            sessions = session_factory(engine)
            cache = MetadataCache()
            async with unit_of_work(sessions, readonly=True) as session:
                view = await cache.view(session, org_id)
            names = args.object or sorted(o.api_name for o in view.objects.values())
            unknown = [n for n in names if view.object(n) is None]
            if unknown:
                raise CliError(f"no such object: {', '.join(unknown)}", EXIT_FAILURE)
            counts: dict[str, int] = {}
            for name in names:
                async with unit_of_work(sessions) as session:
                    view = await cache.view(session, org_id)
                    counts |= await rebuild_index(session, view=view, objects=[name])
            return counts

    counts = asyncio.run(run())
    for name, count in counts.items():
        print(f"{name}: {count} record(s) indexed")
    print(f"search index rebuilt for {len(counts)} object(s)")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    """Run SOQL as a named user (that user's permissions and sharing apply) and print JSON."""
    from nexus.contracts.errors import NexusError
    from nexus.identity.errors import UnknownUser
    from nexus.identity.repository import IdentityRepository
    from nexus.platform.db import session_factory, unit_of_work
    from nexus.runtime.access import load_access
    from nexus.runtime.metadata.view import MetadataCache
    from nexus.runtime.query.engine import query_current

    settings = load_settings()

    async def run() -> dict[str, Any]:
        async with (
            _service_engine(settings, LogicalService.RUNTIME, "nexus-query") as engine,
            unit_of_work(session_factory(engine), readonly=True) as session,
        ):
            user = await IdentityRepository(session).user_by_username(args.username)
            if user is None or not user["is_active"]:
                raise UnknownUser(f"no active user {args.username!r}")
            access = await load_access(session, user["org_id"], user["user_id"])
            page = await query_current(
                session,
                cache=MetadataCache(),
                access=access,
                soql=args.soql,
                include_deleted=False,
                page_size=args.limit,
                start=0,
            )
        return {"totalSize": page.total_size, "done": page.done, "records": page.records}

    try:
        result = asyncio.run(run())
    except NexusError as exc:
        raise CliError(f"{exc.code}: {exc.message}", EXIT_FAILURE) from None
    print(json.dumps(result, indent=2, sort_keys=True, default=str))
    return 0


# ---------------------------------------------------------------------------- catalog

#: The built-in Apps `nexus up` installs on an org that never had them.
BUILTIN_PACKAGES = (Path(__file__).resolve().parent / "apps" / "sfcrm" / "package",)


@asynccontextmanager
async def _catalog_ctx(settings: Settings) -> AsyncIterator[Any]:
    """Release jobs run in this process: the catalog database, Runtime over HTTP as the
    `catalog` workload (exactly what the catalog role does)."""
    from nexus.catalog.app import catalog_context

    async with (
        _service_engine(settings, LogicalService.CATALOG, "nexus-catalog") as engine,
        httpx.AsyncClient(trust_env=False, follow_redirects=False) as client,
    ):
        yield catalog_context(settings, engine, client)


def _catalog_run(settings: Settings, job: Callable[[Any], Awaitable[T]]) -> T:
    """Run `job(ctx)`; operator-facing failures become one line (the job stays journaled)."""
    from nexus.catalog.console import ConsoleError
    from nexus.contracts.errors import NexusError
    from nexus.platform.observability import configure_logging

    configure_logging(role="catalog-cli", level="error", fmt=settings.log.log_format)

    async def run() -> T:
        async with _catalog_ctx(settings) as ctx:
            return await job(ctx)

    try:
        return asyncio.run(run())
    except ConsoleError as exc:
        raise CliError(str(exc), EXIT_FAILURE) from None
    except NexusError as exc:
        hint = " (resume with `nexus catalog resume`)" if exc.status >= 500 else ""
        raise CliError(f"{exc.code}: {exc.message}{hint}", EXIT_FAILURE) from None


def _apply_package(settings: Settings, path: Path) -> int:
    _catalog_run(settings, lambda ctx: _apply_job(ctx, path))
    return 0


async def _apply_job(ctx: Any, path: Path, *, quiet_if_installed: bool = False) -> None:
    """Apply the package at `path` and drive the job to its end, printing each state."""
    from nexus.catalog.console import drive, load_or_report
    from nexus.catalog.errors import AlreadyInstalled
    from nexus.catalog.service import start_apply

    package = load_or_report(path, sys.stderr)
    try:
        org_id, job_id = await start_apply(ctx, package=package)
    except AlreadyInstalled as exc:
        if not quiet_if_installed:
            print(exc.message)
    else:
        title = f"apply {package.manifest.app_id} {package.manifest.version}"
        await drive(ctx, org_id, job_id, sys.stdout, title=title)


def cmd_catalog_validate(args: argparse.Namespace) -> int:
    from nexus.catalog.console import ConsoleError, load_or_report

    try:
        package = load_or_report(Path(args.path), sys.stderr)
    except ConsoleError as exc:
        raise CliError(str(exc), EXIT_FAILURE) from None
    manifest = package.manifest
    print(f"{manifest.app_id} {manifest.version}: {len(package.components)} component(s), valid")
    print(f"digest {package.digest}")
    return 0


def cmd_catalog_apply(args: argparse.Namespace) -> int:
    return _apply_package(load_settings(), Path(args.path))


def cmd_catalog_rollback(args: argparse.Namespace) -> int:
    from nexus.catalog.console import drive
    from nexus.catalog.service import start_rollback

    async def job(ctx: Any) -> None:
        org_id, job_id = await start_rollback(ctx, app_id=args.app, version=args.to)
        await drive(ctx, org_id, job_id, sys.stdout, title=f"rollback {args.app} to {args.to}")

    _catalog_run(load_settings(), job)
    return 0


def cmd_catalog_uninstall(args: argparse.Namespace) -> int:
    from nexus.catalog.console import drive
    from nexus.catalog.service import start_uninstall

    async def job(ctx: Any) -> None:
        org_id, job_id = await start_uninstall(ctx, app_id=args.app)
        await drive(ctx, org_id, job_id, sys.stdout, title=f"uninstall {args.app}")

    _catalog_run(load_settings(), job)
    return 0


def cmd_catalog_resume(args: argparse.Namespace) -> int:
    from nexus.catalog.console import finish, printer
    from nexus.catalog.service import resume

    async def job(ctx: Any) -> list[Any]:
        return [finish(r, sys.stdout) for r in await resume(ctx, progress=printer(sys.stdout))]

    done = _catalog_run(load_settings(), job)
    print(f"resumed {len(done)} release job(s)")
    return 0


def cmd_catalog_status(args: argparse.Namespace) -> int:
    from nexus.catalog.console import print_status
    from nexus.catalog.service import catalog_status

    status = _catalog_run(load_settings(), lambda ctx: catalog_status(ctx.engine))
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print_status(status, sys.stdout)
    return 0


#: `nexus up` retries a built-in install this often when Runtime is briefly unavailable
#: (just started, a transient database error); the job stays journaled in between.
BUILTIN_INSTALL_ATTEMPTS = 4


def cmd_catalog_install_builtin(args: argparse.Namespace) -> int:
    """Deployments without `nexus up`: once runtime-api answers ready, install (or upgrade)
    the built-in Apps an operator has not uninstalled. Exit 1 when that fails."""
    settings = load_settings()
    _wait_until_answers(f"{settings.upstream_url(Role.RUNTIME_API.value)}/readyz", args.wait)
    _install_builtin_apps(settings, strict=True)
    return 0


def _wait_until_answers(url: str, wait_seconds: float) -> None:
    """Return once `url` answers 200; CliError after `wait_seconds`."""
    deadline = time.monotonic() + wait_seconds
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            try:
                status: int | str = client.get(url).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            if status == 200:
                return
            if time.monotonic() >= deadline:
                raise CliError(
                    f"{url} did not answer 200 within {wait_seconds:g}s ({status})", EXIT_FAILURE
                )
            print(f"nexus: waiting for {url} ({status})", file=sys.stderr, flush=True)
            time.sleep(WAIT_RETRY_SECONDS)


def _install_builtin_apps(settings: Settings, *, strict: bool = False) -> None:
    """Install (or upgrade) each built-in App unless an operator uninstalled it. When Runtime
    is unavailable the journaled job is resumed, a few times. `nexus up` (not `strict`):
    any other failure is one line on stderr and the stack keeps running (`nexus catalog
    ...` can finish the job later); `strict`: it is a CliError."""
    from nexus.catalog.console import finish, printer
    from nexus.catalog.service import catalog_status, resume
    from nexus.contracts.errors import NexusError

    async def install(ctx: Any) -> None:
        for attempt in range(1, BUILTIN_INSTALL_ATTEMPTS + 1):
            try:
                if attempt > 1:  # the job the failed attempt journaled
                    for result in await resume(ctx, progress=printer(sys.stdout)):
                        finish(result, sys.stdout)
                status = await catalog_status(ctx.engine)
                for path in BUILTIN_PACKAGES:
                    if status.get("installations", {}).get(path.parent.name) != "uninstalled":
                        await _apply_job(ctx, path, quiet_if_installed=True)
                return
            except NexusError as exc:
                if exc.status < 500 or attempt == BUILTIN_INSTALL_ATTEMPTS:
                    raise
                print(
                    f"nexus: installing the built-in Apps: {exc.code}, trying again "
                    f"({attempt}/{BUILTIN_INSTALL_ATTEMPTS - 1})",
                    file=sys.stderr,
                    flush=True,
                )
                await asyncio.sleep(2 * attempt)

    try:
        _catalog_run(settings, install)
    except CliError as exc:
        if strict:
            raise CliError(f"installing the built-in Apps: {exc}", EXIT_FAILURE) from None
        print(f"nexus: error: installing the built-in Apps: {exc}", file=sys.stderr, flush=True)
    except Exception as exc:  # noqa: BLE001 - the stack must keep running; one line, no URL
        if strict:
            raise CliError(
                f"installing the built-in Apps: {type(exc).__name__}: {_safe(exc)}", EXIT_FAILURE
            ) from None
        print(
            f"nexus: error: installing the built-in Apps: {type(exc).__name__}: {_safe(exc)}",
            file=sys.stderr,
            flush=True,
        )


async def _demo_batch(
    session: Any, *, view: Any, access: Any, caller: Any, object_name: str, items: list[Any]
) -> tuple[list[str], int]:
    """Create the sample records a load has not created yet (found by their external id);
    the id of every item, and how many were created."""
    import re

    from nexus.apps.sfcrm.demo import DEMO_KEY
    from nexus.contracts.records import MutateRequest
    from nexus.runtime.query.engine import run_query
    from nexus.runtime.records.mutate import mutate

    keys = [str(item.fields[DEMO_KEY]) for item in items]
    if not all(re.fullmatch(r"[a-z0-9-]+", k) for k in keys):  # nothing to quote in SOQL
        raise CliError("sample data keys are demo-<object>-<n>", EXIT_FAILURE)
    listed = ", ".join(f"'{k}'" for k in keys)
    soql = f"SELECT Id, {DEMO_KEY} FROM {object_name} WHERE {DEMO_KEY} IN ({listed})"  # noqa: S608 - SOQL of checked keys
    page = await run_query(session, view=view, access=access, soql=soql, page_size=len(keys))
    known = {str(r[DEMO_KEY]): str(r["Id"]) for r in page.records}
    found = [known.get(k) for k in keys]
    missing = [item for item, there in zip(items, found, strict=True) if not there]
    if not missing:
        return [str(k) for k in found], 0
    request = MutateRequest(items=missing, all_or_none=True)
    result = await mutate(session, view=view, access=access, caller=caller, request=request)
    failed = [r for r in result.results if not r.success]
    if failed:
        errors = failed[0].errors[0] if failed[0].errors else None
        detail = f"{errors.category}: {errors.message}" if errors else "refused"
        raise CliError(f"{object_name}: {detail}", EXIT_FAILURE)
    created = iter(str(r.id) for r in result.results)
    return [k or next(created) for k in found], len(missing)


def cmd_demo_load(args: argparse.Namespace) -> int:
    """Sample records through Runtime's record operations, as a named user (permissions,
    validation rules and flows apply as for any caller)."""
    from nexus.apps.sfcrm.demo import demo_batches
    from nexus.contracts.errors import NexusError
    from nexus.contracts.identity import TrustedCall
    from nexus.identity.repository import IdentityRepository
    from nexus.platform.db import session_factory, unit_of_work
    from nexus.runtime.access import load_access
    from nexus.runtime.metadata.view import MetadataCache

    settings = load_settings()

    async def run() -> dict[str, list[int]]:
        counts: dict[str, list[int]] = {}  # object -> [created, already there]
        cache = MetadataCache()
        async with _service_engine(settings, LogicalService.RUNTIME, "nexus-demo") as engine:
            sessions = session_factory(engine)
            async with unit_of_work(sessions, readonly=True) as session:
                user = await IdentityRepository(session).user_by_username(args.username)
                if user is None or not user["is_active"]:
                    raise CliError(f"no active user {args.username!r}", EXIT_FAILURE)
                org = await IdentityRepository(session).org(user["org_id"])
            caller = TrustedCall(
                org_id=user["org_id"],
                user_id=user["user_id"],
                session_id="",
                client_id=None,
                scopes=frozenset({"full"}),
                security_epoch=int(org["security_epoch"]) if org else 0,
                via="delegation",
                workload="cli",
            )
            ids: dict[str, list[str]] = {}
            for object_name, build in demo_batches(args.accounts, seed=args.seed):
                async with unit_of_work(sessions) as session:
                    view = await cache.view(session, caller.org_id)
                    if view.object(object_name) is None:
                        raise CliError(
                            f"no object {object_name}: install sfcrm first", EXIT_FAILURE
                        )
                    access = await load_access(session, caller.org_id, caller.user_id)
                    items = build(ids)
                    batch_ids, created = await _demo_batch(
                        session,
                        view=view,
                        access=access,
                        caller=caller,
                        object_name=object_name,
                        items=items,
                    )
                ids.setdefault(object_name, []).extend(batch_ids)
                count = counts.setdefault(object_name, [0, 0])
                count[0] += created
                count[1] += len(items) - created
        return counts

    try:
        counts = asyncio.run(run())
    except NexusError as exc:
        raise CliError(f"{exc.code}: {exc.message}", EXIT_FAILURE) from None
    for name, (created, existing) in counts.items():
        there = f", {existing} already there" if existing else ""
        print(f"{name}: {created} record(s) created{there}")
    return 0


def _add_catalog_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    catalog = sub.add_parser("catalog", help="App packages: validate, install, upgrade, remove")
    csub = catalog.add_subparsers(dest="catalog_command", required=True, parser_class=_Parser)
    validate = csub.add_parser("validate", help="check a package (directory or .nexuspkg)")
    validate.add_argument("path")
    validate.set_defaults(handler=cmd_catalog_validate)
    apply = csub.add_parser("apply", help="install or upgrade an App from a package")
    apply.add_argument("path")
    apply.set_defaults(handler=cmd_catalog_apply)
    rollback = csub.add_parser("rollback", help="reinstall an earlier release (a new revision)")
    rollback.add_argument("app")
    rollback.add_argument("--to", required=True, help="the version to go back to")
    rollback.set_defaults(handler=cmd_catalog_rollback)
    uninstall = csub.add_parser("uninstall", help="remove an App nothing depends on")
    uninstall.add_argument("app")
    uninstall.set_defaults(handler=cmd_catalog_uninstall)
    resume = csub.add_parser("resume", help="continue release jobs a crash interrupted")
    resume.set_defaults(handler=cmd_catalog_resume)
    status = csub.add_parser("status", help="installed Apps, revisions and recent jobs")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_catalog_status)
    builtin = csub.add_parser(
        "install-builtin", help="install the built-in Apps (deployments without `nexus up`)"
    )
    builtin.add_argument(
        "--wait", type=float, default=0.0, help="seconds to wait for runtime-api to be ready"
    )
    builtin.set_defaults(handler=cmd_catalog_install_builtin)
    demo = sub.add_parser("demo", help="sample data")
    dsub = demo.add_subparsers(dest="demo_command", required=True, parser_class=_Parser)
    load = dsub.add_parser("load", help="create sample Accounts, Contacts, Opportunities")
    load.add_argument("--username", default="admin", help="whose records (default admin)")
    load.add_argument("--accounts", type=int, default=200, help="how many (default 200)")
    load.add_argument("--seed", type=int, default=7)
    load.set_defaults(handler=cmd_demo_load)


# ---------------------------------------------------------------------------- integration


def _read_route_file(path: str) -> Any:
    import yaml

    from nexus.integration.routes import RouteFileError, parse_route_file

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(f"cannot read {path}: {type(exc).__name__}: {_safe(exc)}") from None
    try:
        return parse_route_file(raw)
    except RouteFileError as exc:
        for where, message in exc.problems:
            print(f"{path}: {where}: {message}", file=sys.stderr)
        raise CliError(
            f"{len(exc.problems)} problem(s); nothing was applied", EXIT_FAILURE
        ) from None


def cmd_integration_apply_routes(args: argparse.Namespace) -> int:
    from nexus.integration.route_service import OrgNotConfigured, apply_routes, route_org
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="integration-admin", level="warning", fmt=settings.log.log_format)
    route_file = _read_route_file(args.file)

    async def run() -> list[Any]:
        configured = route_file.org_id or settings.integration.integration_org_id
        if configured is None:  # the deployment's org (phase one runs one)
            async with _service_engine(settings, LogicalService.RUNTIME, "nexus-org") as rt:
                configured = await _first_org_id(rt)
        try:
            org_id = route_org(route_file, configured)
        except OrgNotConfigured as exc:
            raise CliError(str(exc), EXIT_FAILURE) from None
        async with _service_engine(
            settings, LogicalService.INTEGRATION, "nexus-integration-admin"
        ) as engine:
            return await apply_routes(engine, org_id=org_id, route_file=route_file)

    try:
        applied = asyncio.run(run())
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001  (one line, never the URL)
        raise CliError(
            f"apply failed ({type(exc).__name__}: {_safe(exc)}); run `nexus migrate` first?",
            EXIT_FAILURE,
        ) from None
    for route in applied:
        state = "changed" if route.changed else "unchanged"
        active = "" if route.active else ", inactive"
        print(f"{route.connector}/{route.route}: version {route.version} ({state}{active})")
    return 0


def cmd_hooks_send(args: argparse.Namespace) -> int:
    from nexus.integration.route_service import find_route
    from nexus.integration.routes import RouteDeclaration
    from nexus.integration.sender import signed_headers
    from nexus.platform.observability import configure_logging
    from nexus.platform.secrets import WebhookSecretMissing, read_webhook_secret

    settings = load_settings()
    configure_logging(role="hooks", level="warning", fmt=settings.log.log_format)
    declaration: RouteDeclaration | None = None
    if args.routes:
        route_file = _read_route_file(args.routes)
        declaration = next(
            (
                r
                for r in route_file.routes
                if (r.connector, r.route) == (args.connector, args.route)
            ),
            None,
        )
    else:

        async def lookup() -> RouteDeclaration | None:
            async with _service_engine(
                settings, LogicalService.INTEGRATION, "nexus-integration-admin"
            ) as engine:
                found = await find_route(
                    engine,
                    org_id=settings.integration.integration_org_id,
                    connector=args.connector,
                    route=args.route,
                )
            return found.declaration if found else None

        declaration = asyncio.run(lookup())
    if declaration is None:
        raise CliError(f"no active route {args.connector}/{args.route}", EXIT_FAILURE)
    try:
        secret = read_webhook_secret(settings.var_dir, declaration.secrets[0])
    except WebhookSecretMissing as exc:
        hint = f"nexus hooks set-secret {declaration.secrets[0]}"
        raise CliError(f"{exc} ({hint})", EXIT_FAILURE) from None
    try:
        body = Path(args.file).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    base = settings.public_base_url.rstrip("/")
    url = args.url or f"{base}/webhooks/{args.connector}/{args.route}"
    try:
        headers = signed_headers(
            declaration,
            secret,
            body=body,
            url=url,
            event_kind=args.event_kind,
            delivery_id=args.delivery_id,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        reply = httpx.post(url, content=body, headers=headers, timeout=30, trust_env=False)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach {url} ({type(exc).__name__})", EXIT_FAILURE) from None
    print(f"status: {reply.status_code}")
    try:
        answer = reply.json()
    except ValueError:
        answer = {}
    if reply.is_success:
        print(f"receipt_id: {answer.get('receipt_id')}")
        print(f"duplicate: {str(answer.get('duplicate')).lower()}")
        return 0
    print(f"error: {answer.get('code', '')} {answer.get('message', '')}".rstrip())
    return EXIT_FAILURE


def cmd_hooks_set_secret(args: argparse.Namespace) -> int:
    import base64
    import secrets as token_source

    from nexus.platform.observability import configure_logging
    from nexus.platform.secrets import write_webhook_secret

    settings = load_settings()
    configure_logging(role="hooks", level="warning", fmt=settings.log.log_format)
    if args.generate:
        value = "whsec_" + base64.b64encode(token_source.token_bytes(32)).decode()
    else:
        value = sys.stdin.readline().rstrip("\n")
    try:
        path = write_webhook_secret(settings.var_dir, args.ref, value)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.generate:
        print(f"secret: {value}  (shown once; give it to the sender)")
    print(f"stored {path}")
    return 0


# ---------------------------------------------------------------------------- work


def _work_tables(service: LogicalService) -> dict[str, Any]:
    """The work-engine table sets a service keeps, by name."""
    if service is LogicalService.INTEGRATION:
        from nexus.integration.models import work

        return {"integration": work}
    if service is LogicalService.RUNTIME:
        from nexus.runtime.metadata.models import inbox, outbox

        return {"inbox": inbox, "outbox": outbox}
    raise CliError(f"{service.value} keeps no work queues")


def cmd_work_stats(args: argparse.Namespace) -> int:
    from nexus.platform.db import reading
    from nexus.platform.observability import configure_logging
    from nexus.platform.workqueue.operate import list_parked
    from nexus.platform.workqueue.stats import ALL_STATES, OPEN_STATES, queue_stats

    settings = load_settings()
    configure_logging(role="work", level="warning", fmt=settings.log.log_format)
    services = (
        [LogicalService(args.service)]
        if args.service
        else [LogicalService.INTEGRATION, LogicalService.RUNTIME]
    )

    async def run() -> list[str]:
        lines = [f"{'QUEUE':12} {'FAMILY':28} {'CLASS':12} {'STATE':16} {'COUNT':>8} OLDEST"]
        halted = []
        for service in services:
            async with (
                _service_engine(settings, service, "nexus-work") as engine,
                reading(engine) as conn,
            ):
                for name, tables in _work_tables(service).items():
                    states = ALL_STATES if args.all else OPEN_STATES
                    for c in (await queue_stats(conn, tables, states=states)).counts:
                        if c.count or args.all:
                            age = (
                                "" if c.oldest_age_ms is None else f"{c.oldest_age_ms / 1000:.1f}s"
                            )
                            lines.append(
                                f"{name:12} {c.family:28} {c.queue_class:12} {c.state:16} "
                                f"{c.count:>8} {age}".rstrip()
                            )
                    halted += [
                        f"{name}: lane {p.family} {p.lane_key} halted by {p.id} ({p.state})"
                        for p in await list_parked(conn, tables, halting_only=True, limit=50)
                    ]
        return lines + halted

    try:
        lines = asyncio.run(run())
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001  (one line, never the URL)
        raise CliError(
            f"cannot read the work queues ({type(exc).__name__}: {_safe(exc)}); "
            "run `nexus migrate` first?",
            EXIT_FAILURE,
        ) from None
    for line in lines:
        print(line)
    return 0


def cmd_work_transfer(args: argparse.Namespace) -> int:
    from nexus.contracts.errors import Conflict
    from nexus.platform.observability import configure_logging
    from nexus.platform.workqueue.families import TransferBlocked, transfer

    settings = load_settings()
    configure_logging(role="work", level="warning", fmt=settings.log.log_format)
    service = LogicalService(args.service)

    async def run() -> list[str]:
        moved = []
        async with _service_engine(settings, service, "nexus-work") as engine:
            for name, tables in _work_tables(service).items():
                try:
                    epoch = await transfer(
                        engine, tables, args.family, args.to, timeout_s=args.timeout
                    )
                except TransferBlocked:
                    raise
                except Conflict as exc:
                    if exc.code == "NOT_FOUND":
                        continue
                    raise CliError(exc.message, EXIT_FAILURE) from None
                moved.append(
                    f"{name}: work family {args.family} is owned by {args.to} "
                    f"(ownership epoch {epoch})"
                )
        if not moved:
            raise CliError(f"no work family {args.family!r} in {service.value}", EXIT_FAILURE)
        return moved

    try:
        lines = asyncio.run(run())
    except TransferBlocked as exc:
        for item in exc.blocking:
            print(f"blocking: {item}")
        raise CliError(exc.message, EXIT_FAILURE) from None
    for line in lines:
        print(line)
    return 0


# ---------------------------------------------------------------------------- main


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nexus", description="Nexus CRM platform")
    parser.add_argument("--version", action="version", version=f"nexus {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run exactly one role in this process")
    serve.add_argument("--role", required=True, help=", ".join(r.value for r in Role))
    serve.add_argument("--app", help="the App of --role=app (default: sfcrm)")
    serve.add_argument("--host", help="listen address (default: NEXUS_HOST)")
    serve.add_argument("--port", type=_port, help="listen port (default: from NEXUS_PORT_BASE)")
    serve.add_argument(
        "--loops",
        choices=["none", "all"],
        help="--role=integration: run background loops (default all) or ingress only",
    )
    serve.set_defaults(handler=cmd_serve)

    up = sub.add_parser("up", help="run the whole local stack, one process per role")
    up.add_argument("--ready-timeout", type=float, default=60.0, help="seconds (default 60)")
    up.set_defaults(handler=cmd_up)

    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.add_argument("--service", choices=[s.value for s in LogicalService])
    migrate.add_argument(
        "--wait", type=float, default=0.0, help="seconds to wait for the database to answer"
    )
    migrate.set_defaults(handler=cmd_migrate)

    health = sub.add_parser("healthcheck", help="exit 0 when a role here answers 200")
    health.add_argument("--port", type=_port, help="default: the port of --role")
    health.add_argument("--role", default=Role.GATEWAY.value, choices=[r.value for r in Role])
    health.add_argument("--host", default="127.0.0.1")
    health.add_argument("--ready", action="store_true", help="ask /readyz (default /healthz)")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    health.set_defaults(handler=cmd_healthcheck)

    make = sub.add_parser("makemigration", help="create an empty revision (developers)")
    make.add_argument("--service", required=True, choices=[s.value for s in LogicalService])
    make.add_argument("-m", "--message", required=True)
    make.set_defaults(handler=cmd_makemigration)

    _add_admin_parser(sub)
    _add_integration_parsers(sub)
    _add_work_parsers(sub)
    _add_catalog_parsers(sub)
    meta = sub.add_parser("metadata", help="apply metadata (objects and fields)")
    meta_sub = meta.add_subparsers(dest="metadata_command", required=True, parser_class=_Parser)
    apply = meta_sub.add_parser("apply", help="apply a YAML batch atomically")
    apply.add_argument("file")
    apply.add_argument("--org-id", help="default: the deployment's org")
    apply.set_defaults(handler=cmd_metadata_apply)
    resume = meta_sub.add_parser("resume", help="complete applies interrupted by a crash")
    resume.set_defaults(handler=cmd_metadata_resume)
    reindex = meta_sub.add_parser("reindex", help="rebuild the global search index")
    reindex.add_argument("--object", action="append", help="only this object (repeatable)")
    reindex.add_argument("--org-id", help="default: the deployment's org")
    reindex.set_defaults(handler=cmd_metadata_reindex)
    query = sub.add_parser("query", help="run SOQL as a user (operators: look at records)")
    query.add_argument("soql")
    query.add_argument("--username", required=True, help="whose permissions apply")
    query.add_argument("--limit", type=int, default=200, help="rows (default 200)")
    query.set_defaults(handler=cmd_query)
    return parser


def _add_admin_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    admin = sub.add_parser("admin", help="identity administration")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, parser_class=_Parser)
    user = admin_sub.add_parser("create-user", help="create a user (prints a generated password)")
    user.add_argument("--username", required=True)
    user.add_argument("--email")
    user.add_argument("--display-name")
    user.add_argument("--admin", action="store_true", help="System Administrator")
    user.add_argument("--role", help="role in the role hierarchy")
    user.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    user.set_defaults(handler=cmd_admin_create_user)
    client = admin_sub.add_parser("create-client", help="create a Connected App (OAuth client)")
    client.add_argument("--name", required=True)
    client.add_argument("--grant-type", action="append", required=True)
    client.add_argument("--scope", action="append", required=True)
    client.add_argument("--redirect-uri", action="append")
    client.add_argument("--run-as", help="username the client_credentials grant acts as")
    client.add_argument("--public", action="store_true", help="no secret; PKCE required")
    client.set_defaults(handler=cmd_admin_create_client)
    role = admin_sub.add_parser("create-role", help="add a role to the role hierarchy")
    role.add_argument("--name", required=True)
    role.add_argument("--parent", help="the role above it")
    role.set_defaults(handler=cmd_admin_create_role)
    assign = admin_sub.add_parser("assign-permission-set", help="grant a permission set")
    assign.add_argument("--username", required=True)
    assign.add_argument("--permission-set", required=True)
    assign.add_argument("--remove", action="store_true", help="take it away instead")
    assign.set_defaults(handler=cmd_admin_assign)
    clients = admin_sub.add_parser("list-clients", help="list Connected Apps")
    clients.set_defaults(handler=cmd_admin_list_clients)
    disable = admin_sub.add_parser("disable-client", help="disable a Connected App")
    disable.add_argument("--client-id", required=True)
    disable.set_defaults(handler=cmd_admin_disable_client)
    revoke = admin_sub.add_parser("revoke-user", help="revoke every session of a user")
    revoke.add_argument("--username", required=True)
    revoke.add_argument("--deactivate", action="store_true")
    revoke.set_defaults(handler=cmd_admin_revoke_user)
    boot = admin_sub.add_parser("bootstrap", help="on an empty database: org + first admin")
    boot.set_defaults(handler=cmd_admin_bootstrap)
    rotate = admin_sub.add_parser("rotate-keys", help="add a new identity signing key")
    rotate.set_defaults(handler=cmd_admin_rotate_keys)
    init = admin_sub.add_parser(
        "init-secrets", help="each role's secrets directory, for deployments without `nexus up`"
    )
    init.add_argument("--dir", required=True, help="writes DIR/<role>/ (mount it as its secrets)")
    init.add_argument("--role", action="append", help="only this role (repeatable; default all)")
    init.add_argument("--owner", help="UID:GID to own the files (a container's user)")
    init.set_defaults(handler=cmd_admin_init_secrets)
    _add_outbound_parsers(admin_sub)
    _add_binding_parsers(admin_sub)


def _add_binding_parsers(admin_sub: argparse._SubParsersAction[_Parser]) -> None:
    bind = admin_sub.add_parser("bind-workload", help="run a workload's commands as a user")
    bind.add_argument("--workload", required=True, help="e.g. integration")
    bind.add_argument("--username", required=True)
    bind.set_defaults(handler=cmd_admin_bind_workload)
    unbind = admin_sub.add_parser("unbind-workload", help="refuse a workload's commands")
    unbind.add_argument("--workload", required=True)
    unbind.set_defaults(handler=cmd_admin_unbind_workload)
    bindings = admin_sub.add_parser("list-bindings", help="list workload run-as bindings")
    bindings.set_defaults(handler=cmd_admin_list_bindings)


def _add_outbound_parsers(admin_sub: argparse._SubParsersAction[_Parser]) -> None:
    bind = admin_sub.add_parser(
        "set-outbound-endpoint", help="bind a flow webhook endpoint name to a URL"
    )
    bind.add_argument("name", help="the endpoint name flows use")
    bind.add_argument("url", help="http(s) URL deliveries are POSTed to")
    bind.add_argument(
        "--secret-ref", required=True, help="signing secret (`nexus hooks set-secret`)"
    )
    bind.add_argument("--org-id", help="default: the deployment's org")
    bind.set_defaults(handler=cmd_admin_set_outbound_endpoint)
    endpoints = admin_sub.add_parser("list-outbound-endpoints", help="list endpoint bindings")
    endpoints.add_argument("--org-id", help="default: the deployment's org")
    endpoints.set_defaults(handler=cmd_admin_list_outbound_endpoints)
    unbind = admin_sub.add_parser("disable-outbound-endpoint", help="stop delivering to one")
    unbind.add_argument("name")
    unbind.add_argument("--org-id", help="default: the deployment's org")
    unbind.set_defaults(handler=cmd_admin_disable_outbound_endpoint)


def _add_integration_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    integration = sub.add_parser("integration", help="connector routes")
    isub = integration.add_subparsers(
        dest="integration_command", required=True, parser_class=_Parser
    )
    apply = isub.add_parser("apply-routes", help="apply a YAML file of route declarations")
    apply.add_argument("file")
    apply.set_defaults(handler=cmd_integration_apply_routes)

    hooks = sub.add_parser("hooks", help="webhook tools")
    hsub = hooks.add_subparsers(dest="hooks_command", required=True, parser_class=_Parser)
    send = hsub.add_parser("send", help="sign a JSON file for a route and POST it")
    send.add_argument("--connector", required=True)
    send.add_argument("--route", required=True)
    send.add_argument("--event-kind", help="for routes that read the event kind from a header")
    send.add_argument("--delivery-id", help="default: a fresh id (repeat one to redeliver)")
    send.add_argument("--url", help="default: the gateway's /webhooks/CONNECTOR/ROUTE")
    send.add_argument("--routes", help="read the route from this YAML file, not the database")
    send.add_argument("file")
    send.set_defaults(handler=cmd_hooks_send)
    secret = hsub.add_parser("set-secret", help="store a webhook secret (value read from stdin)")
    secret.add_argument("ref", help="the name routes use in `secrets:`")
    secret.add_argument("--generate", action="store_true", help="generate one and print it once")
    secret.set_defaults(handler=cmd_hooks_set_secret)


def _add_work_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    work = sub.add_parser("work", help="work queues: statistics, family ownership")
    wsub = work.add_subparsers(dest="work_command", required=True, parser_class=_Parser)
    services = ["integration", "runtime"]
    stats = wsub.add_parser("stats", help="items per queue and state; halted lanes")
    stats.add_argument("--service", choices=services, help="default: both")
    stats.add_argument("--all", action="store_true", help="finished states and empty ones too")
    stats.set_defaults(handler=cmd_work_stats)
    move = wsub.add_parser("transfer", help="move a work family to another owner")
    move.add_argument("--service", choices=services, required=True)
    move.add_argument("--family", required=True)
    move.add_argument("--to", required=True, help="the new owner")
    move.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for live leases (60)"
    )
    move.set_defaults(handler=cmd_work_transfer)


def _port(raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {raw!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range 1-65535")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
        return int(args.handler(args))
    except (CliError, SettingsError) as exc:
        code = exc.code if isinstance(exc, CliError) else EXIT_USAGE
        print(f"nexus: error: {exc}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
