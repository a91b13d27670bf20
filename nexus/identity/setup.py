"""Identity's start-up inside `runtime-api`, and the first-admin bootstrap of `nexus up`."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.identity import service
from nexus.identity.delegation import WorkloadVerifier
from nexus.identity.endpoints import DEFAULT_CLIENT_ID, IdentityState
from nexus.identity.interceptor import Authenticator
from nexus.identity.keys import KeyRing, ensure_key, key_dir
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import unit_of_work
from nexus.platform.observability import get_logger
from nexus.platform.secrets import secrets_dir
from nexus.platform.service_app import ServiceState
from nexus.platform.settings import Settings, SettingsError
from nexus.platform.workload import load_public_keys, workload_key_dir

log = get_logger(__name__)
ADMIN_USERNAME = "admin"
#: The browser CRM (frontend/): a public client, authorization code + PKCE, refresh rotation.
WEB_CLIENT_ID = "nexus_web"
#: The browser CRM's scopes (`scopes`): its data screens, staying signed in, its admin screens.
WEB_CLIENT_SCOPES = ["admin", "api", "refresh_token"]
WEB_CALLBACK_PATH = "/auth/callback"


def load_identity_config(settings: Settings) -> service.IdentityConfig:
    directory = key_dir(secrets_dir(settings.var_dir))
    if settings.core.env == "development":
        ensure_key(directory)
    elif not any(directory.glob("*.pem")):
        raise SettingsError(
            f"NEXUS_VAR_DIR: no identity signing key in {directory} "
            "(create one with `nexus admin rotate-keys`)"
        )
    ident = settings.identity
    keys = KeyRing.load(
        directory,
        retire_after_seconds=ident.access_token_ttl_seconds + ident.delegation_ttl_seconds + 60,
    )
    pem = next(iter(sorted(directory.glob("*.pem")))).read_bytes()
    return service.IdentityConfig(
        settings=ident,
        keys=keys,
        issuer=settings.public_base_url,
        signature_key=hashlib.sha256(b"nexus-token-signature\0" + pem).digest(),
    )


def identity_lifespan(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        cfg = load_identity_config(settings)
        workload_keys = load_public_keys(workload_key_dir(secrets_dir(settings.var_dir)))
        app.state.identity = IdentityState(
            cfg=cfg,
            authenticator=Authenticator(cfg, state.sessions),
            sessions=state.sessions,
            workloads=WorkloadVerifier(workload_keys, audience=RUNTIME_AUDIENCE),
        )
        yield

    return start


async def bootstrap_first_admin(
    sessions: async_sessionmaker[AsyncSession], *, password: str | None
) -> tuple[str, str | None] | None:
    """On an empty database: an org, the `admin` user and the default public client.

    Returns (username, generated password or None when one was given); None when users exist.
    """
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        if await repo.count_users() > 0:
            return None
        generated = None
        if password is None:
            generated = password = secrets.token_urlsafe(18)
        org_id = await service.create_org(repo, name="Nexus")
        await service.create_role(repo, org_id=org_id, name="CEO")
        admin_id = await service.create_user(
            repo,
            org_id=org_id,
            username=ADMIN_USERNAME,
            password=password,
            display_name="Administrator",
            is_admin=True,
            role_name="CEO",
        )
        await repo.insert_client(
            org_id=org_id,
            client_id=DEFAULT_CLIENT_ID,
            name="Nexus (password sign-in)",
            secret_hash=None,
            redirect_uris=[],
            grant_types=["password"],
            scopes=["api", "full"],
            run_as_user_id=None,
            now_ms=await read_now_ms(session),
        )
    log.info("identity.bootstrapped", org_id=org_id, admin_user_id=admin_id)
    return ADMIN_USERNAME, generated


async def ensure_web_client(
    sessions: async_sessionmaker[AsyncSession], *, origins: list[str]
) -> bool:
    """`nexus up`: register the browser CRM's public client, or point its redirect URIs at
    this deployment's gateway origins (ports can change between starts). Idempotent; an
    operator's `disable-client` stays in force. True when something was written."""
    redirect_uris = sorted({origin.rstrip("/") + WEB_CALLBACK_PATH for origin in origins})
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        existing = await repo.client(WEB_CLIENT_ID)
        if existing is not None:
            uris, _, scopes = service.client_lists(existing)
            if uris == redirect_uris and sorted(scopes) == WEB_CLIENT_SCOPES:
                return False
            await repo.set_client_redirect_uris(
                client_id=WEB_CLIENT_ID, redirect_uris=redirect_uris
            )
            # a client registered before the scope model lacks `admin` (its admin screens)
            await repo.set_client_scopes(client_id=WEB_CLIENT_ID, scopes=WEB_CLIENT_SCOPES)
            return True
        org = await repo.first_org()
        if org is None:
            return False
        await repo.insert_client(
            org_id=str(org["org_id"]),
            client_id=WEB_CLIENT_ID,
            name="Nexus CRM (browser)",
            secret_hash=None,
            redirect_uris=redirect_uris,
            grant_types=["authorization_code", "refresh_token"],
            scopes=WEB_CLIENT_SCOPES,
            run_as_user_id=None,
            now_ms=await read_now_ms(session),
        )
    log.info("identity.web_client_registered", client_id=WEB_CLIENT_ID)
    return True
