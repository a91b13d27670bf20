"""`nexus integration apply-routes` and `nexus hooks send|set-secret`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from nexus.cli.common import (
    EXIT_FAILURE,
    CliError,
    Parser,
    Subparsers,
    first_org_id,
    safe_reason,
    service_engine,
)
from nexus.contracts.roles import LogicalService
from nexus.platform.settings import load_settings

if TYPE_CHECKING:
    pass


def read_route_file(path: str) -> Any:
    import yaml

    from nexus.integration.routing.routes import RouteFileError, parse_route_file

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(f"cannot read {path}: {type(exc).__name__}: {safe_reason(exc)}") from None
    try:
        return parse_route_file(raw)
    except RouteFileError as exc:
        for where, message in exc.problems:
            print(f"{path}: {where}: {message}", file=sys.stderr)
        raise CliError(
            f"{len(exc.problems)} problem(s); nothing was applied", EXIT_FAILURE
        ) from None


def cmd_integration_apply_routes(args: argparse.Namespace) -> int:
    from nexus.integration.routing.service import OrgNotConfigured, apply_routes, route_org
    from nexus.platform.observability import configure_logging

    settings = load_settings()
    configure_logging(role="integration-admin", level="warning", fmt=settings.log.log_format)
    route_file = read_route_file(args.file)

    async def run() -> list[Any]:
        configured = route_file.org_id or settings.integration.integration_org_id
        if configured is None:  # the deployment's org (phase one runs one)
            async with service_engine(settings, LogicalService.RUNTIME, "nexus-org") as rt:
                configured = await first_org_id(rt)
        try:
            org_id = route_org(route_file, configured)
        except OrgNotConfigured as exc:
            raise CliError(str(exc), EXIT_FAILURE) from None
        async with service_engine(
            settings, LogicalService.INTEGRATION, "nexus-integration-admin"
        ) as engine:
            return await apply_routes(engine, org_id=org_id, route_file=route_file)

    try:
        applied = asyncio.run(run())
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001  (one line, never the URL)
        raise CliError(
            f"apply failed ({type(exc).__name__}: {safe_reason(exc)}); run `nexus migrate` first?",
            EXIT_FAILURE,
        ) from None
    for route in applied:
        state = "changed" if route.changed else "unchanged"
        active = "" if route.active else ", inactive"
        print(f"{route.connector}/{route.route}: version {route.version} ({state}{active})")
    return 0


def cmd_hooks_send(args: argparse.Namespace) -> int:
    from nexus.integration.ingress.sender import signed_headers
    from nexus.integration.routing.routes import RouteDeclaration
    from nexus.integration.routing.service import find_route
    from nexus.platform.observability import configure_logging
    from nexus.platform.secrets import WebhookSecretMissing, read_webhook_secret

    settings = load_settings()
    configure_logging(role="hooks", level="warning", fmt=settings.log.log_format)
    declaration: RouteDeclaration | None = None
    if args.routes:
        route_file = read_route_file(args.routes)
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
            async with service_engine(
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


def add_parsers(sub: Subparsers) -> None:
    integration = sub.add_parser("integration", help="connector routes")
    isub = integration.add_subparsers(
        dest="integration_command", required=True, parser_class=Parser
    )
    apply = isub.add_parser("apply-routes", help="apply a YAML file of route declarations")
    apply.add_argument("file")
    apply.set_defaults(handler=cmd_integration_apply_routes)

    hooks = sub.add_parser("hooks", help="webhook tools")
    hsub = hooks.add_subparsers(dest="hooks_command", required=True, parser_class=Parser)
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
