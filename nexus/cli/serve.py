"""`nexus serve` runs one role in this process; `nexus up` supervises the whole local stack,
one process per role; `nexus healthcheck` asks a role here whether it answers."""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from nexus import __version__
from nexus.cli.admin import announce_admin, bootstrap_admin
from nexus.cli.catalog import install_builtin_apps
from nexus.cli.common import (
    EXIT_FAILURE,
    READY_POLL_SECONDS,
    STACK,
    CliError,
    Subparsers,
    child_name,
    port_number,
)
from nexus.cli.migrate import migrate_services
from nexus.contracts.roles import KNOWN_APPS, ROLE_SERVICE, Role
from nexus.platform.settings import Settings, load_settings

if TYPE_CHECKING:
    from nexus.platform.supervisor import Supervisor


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

    from nexus.platform.db.sqlite import checkpoints as sqlite_checkpoints
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
    workload_signer(settings, child_name(role, app_name))  # production: must be provisioned
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
    ensure_local_secrets(var_dir, [child_name(role, app) for role, app in STACK])
    tls_env, ca_file = _local_tls(settings, var_dir)
    services = sorted({s for s in ROLE_SERVICE.values() if s is not None})
    for line in asyncio.run(migrate_services(settings, services)):
        log.info("migrate.done", state=line)
    announce_admin(asyncio.run(bootstrap_admin(settings)))

    stop_signal: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: stop_signal.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop_signal.append(signum))
    supervisor = Supervisor(
        log_dir=var_dir / "logs", env=dict(os.environ, NEXUS_VAR_DIR=str(var_dir), **tls_env)
    )
    supervisor.start(
        [Child(name=child_name(role, app), argv=_serve_argv(role, app)) for role, app in STACK]
    )
    code = 0
    try:
        url = f"http://{settings.core.host}:{settings.port_for(Role.GATEWAY)}"
        if _wait_until_ready(supervisor, url, args.ready_timeout, stop_signal, var_dir):
            install_builtin_apps(settings)
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


def add_parsers(sub: Subparsers) -> None:
    serve = sub.add_parser("serve", help="run exactly one role in this process")
    serve.add_argument("--role", required=True, help=", ".join(r.value for r in Role))
    serve.add_argument("--app", help="the App of --role=app (default: sfcrm)")
    serve.add_argument("--host", help="listen address (default: NEXUS_HOST)")
    serve.add_argument(
        "--port", type=port_number, help="listen port (default: from NEXUS_PORT_BASE)"
    )
    serve.add_argument(
        "--loops",
        choices=["none", "all"],
        help="--role=integration: run background loops (default all) or ingress only",
    )
    serve.set_defaults(handler=cmd_serve)

    up = sub.add_parser("up", help="run the whole local stack, one process per role")
    up.add_argument("--ready-timeout", type=float, default=60.0, help="seconds (default 60)")
    up.set_defaults(handler=cmd_up)

    health = sub.add_parser("healthcheck", help="exit 0 when a role here answers 200")
    health.add_argument("--port", type=port_number, help="default: the port of --role")
    health.add_argument("--role", default=Role.GATEWAY.value, choices=[r.value for r in Role])
    health.add_argument("--host", default="127.0.0.1")
    health.add_argument("--ready", action="store_true", help="ask /readyz (default /healthz)")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    health.set_defaults(handler=cmd_healthcheck)
