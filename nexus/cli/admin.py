"""`nexus admin ...`: identity administration, workload run-as bindings, outbound webhook
endpoints, signing keys and each role's secrets."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nexus.cli.common import (
    STACK,
    CliError,
    Parser,
    Subparsers,
    T,
    child_name,
    run_admin,
    runtime_sessions,
)
from nexus.contracts.roles import Role
from nexus.platform.settings import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


async def bootstrap_admin(settings: Settings) -> tuple[str, str | None] | None:
    """On an empty database: org, first admin, and the `integration` workload's run-as user;
    on every start: the browser CRM's public client, redirecting to this gateway."""
    from nexus.identity.setup import bootstrap_first_admin, ensure_web_client
    from nexus.runtime.inbox.bindings import bootstrap_integration_binding

    configured = settings.identity.bootstrap_admin_password
    async with runtime_sessions(settings) as sessions:
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


def announce_admin(created: tuple[str, str | None] | None) -> None:
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


def cmd_admin_create_user(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    created = run_admin(
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

    created = run_admin(
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

    revoked = run_admin(args, admin.revoke_user, username=args.username, deactivate=args.deactivate)
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
    created = asyncio.run(bootstrap_admin(settings))
    if created is None:
        print("users exist already; nothing to do")
    announce_admin(created)
    return 0


def cmd_admin_create_role(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    role_id = run_admin(args, admin.create_role, name=args.name, parent=args.parent)
    print(f"role_id: {role_id}")
    return 0


def cmd_admin_assign(args: argparse.Namespace) -> int:
    from nexus.identity.api import Directory, UnknownUser
    from nexus.platform.db.engine import unit_of_work
    from nexus.runtime.access.service import assign_permission_set

    async def assign(sessions: async_sessionmaker[AsyncSession]) -> None:
        async with unit_of_work(sessions) as session:
            user = await Directory(session).user_by_username(args.username)
            if user is None:
                raise UnknownUser(f"no user {args.username!r}")
            await assign_permission_set(
                session,
                org_id=user["org_id"],
                user_id=user["user_id"],
                permission_set=args.permission_set,
                assigned=not args.remove,
            )

    run_admin(args, assign)
    print("removed" if args.remove else "assigned")
    return 0


def cmd_admin_list_clients(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    for client in run_admin(args, admin.list_clients):
        state = "enabled" if client["enabled"] else "disabled"
        kind = "public" if client["public"] else "confidential"
        grants = ",".join(client["grant_types"])  # type: ignore[arg-type]  # list of str
        print(f"{client['client_id']}  {state:8}  {kind:12}  {grants}  {client['name']}")
    return 0


def cmd_admin_disable_client(args: argparse.Namespace) -> int:
    from nexus.identity import admin

    run_admin(args, admin.disable_client, client_id=args.client_id)
    print("connected app disabled; its sessions are revoked")
    return 0


def cmd_admin_bind_workload(args: argparse.Namespace) -> int:
    from nexus.runtime.inbox.bindings import bind_workload

    run_admin(args, bind_workload, workload=args.workload, username=args.username)
    print(f"workload {args.workload}: commands run as {args.username.strip().lower()}")
    return 0


def cmd_admin_unbind_workload(args: argparse.Namespace) -> int:
    from nexus.runtime.inbox.bindings import unbind_workload

    run_admin(args, unbind_workload, workload=args.workload)
    print(f"workload {args.workload}: unbound (its commands are refused)")
    return 0


def cmd_admin_list_bindings(args: argparse.Namespace) -> int:
    from nexus.runtime.inbox.bindings import list_bindings

    for row in run_admin(args, list_bindings):
        state = "" if row["is_active"] else "  (inactive: commands refused)"
        print(f"{row['workload']}  {row['username']}  {row['user_id']}{state}")
    return 0


def cmd_admin_init_secrets(args: argparse.Namespace) -> int:
    """Each role's secrets directory for deployments without `nexus up` (docs/adr/0060)."""
    from nexus.identity.keys import ensure_key, key_dir
    from nexus.platform.secrets import chown_tree, provision_role_secrets

    known = [child_name(role, app) for role, app in STACK]
    chosen = list(dict.fromkeys(args.role or known))
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise CliError(f"unknown role {unknown[0]!r} (known: {', '.join(known)})")
    owner = _owner(args.owner) if args.owner else None
    root = Path(args.dir)
    written = provision_role_secrets(root, chosen)
    runtime = child_name(Role.RUNTIME_API, None)
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


def with_org_connection(args: argparse.Namespace, action: Callable[..., Awaitable[T]]) -> T:
    """Run `action(conn, org_id=...)` in one unit of work on Runtime's database."""
    from nexus.identity.api import Directory
    from nexus.platform.db.engine import unit_of_work

    async def run(sessions: async_sessionmaker[AsyncSession]) -> T:
        async with unit_of_work(sessions) as session:
            org = None if args.org_id else await Directory(session).first_org()
            org_id = args.org_id or (org["org_id"] if org else None)
            if not org_id:
                raise CliError("no org yet: run `nexus up` or `nexus admin bootstrap` first", 1)
            return await action(await session.connection(), org_id=org_id)

    return run_admin(args, run)


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def cmd_admin_set_outbound_endpoint(args: argparse.Namespace) -> int:
    from functools import partial

    from nexus.platform.secrets import WebhookSecretMissing, read_webhook_secret
    from nexus.runtime.outbox.bindings import set_endpoint

    created = with_org_connection(
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

    endpoints = with_org_connection(args, list_endpoints)
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

    with_org_connection(args, partial(disable_endpoint, name=args.name, actor=_actor()))
    print(f"outbound endpoint {args.name}: disabled (its deliveries go to the dead letters)")
    return 0


def add_parsers(sub: Subparsers) -> None:
    admin = sub.add_parser("admin", help="identity administration")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, parser_class=Parser)
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


def _add_binding_parsers(admin_sub: Subparsers) -> None:
    bind = admin_sub.add_parser("bind-workload", help="run a workload's commands as a user")
    bind.add_argument("--workload", required=True, help="e.g. integration")
    bind.add_argument("--username", required=True)
    bind.set_defaults(handler=cmd_admin_bind_workload)
    unbind = admin_sub.add_parser("unbind-workload", help="refuse a workload's commands")
    unbind.add_argument("--workload", required=True)
    unbind.set_defaults(handler=cmd_admin_unbind_workload)
    bindings = admin_sub.add_parser("list-bindings", help="list workload run-as bindings")
    bindings.set_defaults(handler=cmd_admin_list_bindings)


def _add_outbound_parsers(admin_sub: Subparsers) -> None:
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
