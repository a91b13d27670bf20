"""A real runtime-api (identity) on a real socket, per backend, with seeded users and clients."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import httpx
import pytest_asyncio

from nexus.contracts.roles import LogicalService
from nexus.identity import admin, service
from nexus.identity.repository import IdentityRepository
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets
from nexus.platform.settings import load_settings
from nexus.runtime.app import create_api_app
from tests.conftest import Backend
from tests.support.servers import serving

ADMIN_PASSWORD = "admin-password-for-tests-1"
ALICE_PASSWORD = "alice-password-for-tests-1"
REDIRECT = "http://127.0.0.1:9/callback"
STALENESS = 0.6


@dataclass
class Identity:
    url: str
    settings: object
    sessions: object
    confidential: service.NewClient  # password + refresh + authorization_code
    public: service.NewClient  # authorization_code + refresh, PKCE
    machine: service.NewClient  # client_credentials, runs as alice
    other_org_client: service.NewClient
    var_dir: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def identity(backend: Backend, tmp_path_factory) -> AsyncIterator[Identity]:
    var_dir = tmp_path_factory.mktemp("identity-var")
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    await bootstrap_first_admin(sessions, password=ADMIN_PASSWORD)
    await admin.create_user(
        sessions,
        username="alice@example.com",
        password=ALICE_PASSWORD,
        email="alice@example.com",
        display_name="Alice",
        is_admin=False,
    )
    confidential = await admin.create_client(
        sessions,
        name="Integration",
        redirect_uris=[REDIRECT],
        grant_types=["password", "authorization_code", "refresh_token"],
        scopes=["api", "refresh_token"],
        run_as_username=None,
        public=False,
    )
    public = await admin.create_client(
        sessions,
        name="Browser",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        scopes=["api", "refresh_token"],
        run_as_username=None,
        public=True,
    )
    machine = await admin.create_client(
        sessions,
        name="Sync job",
        redirect_uris=[],
        grant_types=["client_credentials"],
        scopes=["api"],
        run_as_username="alice@example.com",
        public=False,
    )
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        other_org = await service.create_org(repo, name="Other")
        other_org_client = await service.create_client(
            repo,
            org_id=other_org,
            name="Other org app",
            redirect_uris=[REDIRECT],
            grant_types=["password"],
            scopes=["api"],
        )
    ensure_local_secrets(var_dir, ["app-sfcrm", "catalog", "integration", "gateway"])
    settings = load_settings(
        var_dir=var_dir,
        runtime_database_url=backend.url(LogicalService.RUNTIME),
        max_security_staleness_seconds=STALENESS,
        login_max_failures=3,
        public_base_url="http://testserver.nexus",
    )
    app = create_api_app(settings)
    async with serving(app) as url:
        yield Identity(
            url=url,
            settings=settings,
            sessions=sessions,
            confidential=confidential,
            public=public,
            machine=machine,
            other_org_client=other_org_client,
            var_dir=var_dir,
        )
    await engine.dispose()


def login_form_fields(html: str) -> dict[str, str]:
    pairs = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', html)
    return {name: unescape(value) for name, value in pairs}


async def sign_in_through_login_page(
    client: httpx.AsyncClient, authorize_url: str, *, username: str, password: str
) -> httpx.Response:
    """What a person does: open the authorize URL, fill in the form, press Sign in."""
    page = await client.get(authorize_url)
    assert page.status_code == 200, page.text
    fields = login_form_fields(page.text)
    fields.update(username=username, password=password, decision="allow")
    return await client.post("/services/oauth2/authorize", data=fields)
