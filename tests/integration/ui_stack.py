"""A real runtime-api and a real sfcrm AppService on loopback sockets, per backend, with the
sfcrm package's sales objects, layouts and list views, and users with different access: what
the browser's server APIs (the UI API, the Runtime admin API) are tested against."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from nexus.apps import sfcrm
from nexus.apps.sfcrm.app import WORKLOAD, create_app
from nexus.contracts.roles import LogicalService
from nexus.identity import admin
from nexus.identity.repository import IdentityRepository
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets
from nexus.platform.settings import load_settings
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.app import create_api_app, create_worker_app
from nexus.runtime.metadata.service import apply_metadata
from tests.conftest import Backend
from tests.e2e.sfcrm_stack import metadata
from tests.support.servers import serving

ADMIN_PASSWORD = "ui-admin-password-1"
PASSWORD = "ui-user-password-1"
UI_COMPONENTS = Path(sfcrm.__file__).parent / "package" / "components" / "ui.yaml"
SALES = ("Account", "Contact", "Opportunity")
#: How long a revoked session or changed permission may still be honoured (seconds).
STALENESS = 0.5
USERS = (("rep1", "Sfcrm_Test_Sales"), ("rep2", "Sfcrm_Test_Sales"), ("viewer", None))


@dataclass
class UiStack:
    runtime_url: str
    sfcrm_url: str
    org_id: str
    sessions: async_sessionmaker[AsyncSession]
    engine: AsyncEngine
    tokens: dict[str, str] = field(default_factory=dict)
    user_ids: dict[str, str] = field(default_factory=dict)

    def headers(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    async def token(self, username: str, password: str) -> str:
        # argon2 is slow on purpose: a sign-in can take more than httpx's 5 s on a loaded machine
        async with httpx.AsyncClient(base_url=self.runtime_url, timeout=30) as client:
            reply = await client.post(
                "/services/oauth2/token",
                data={"grant_type": "password", "username": username, "password": password},
            )
        assert reply.status_code == 200, reply.text
        return str(reply.json()["access_token"])


def sales_metadata() -> dict[str, Any]:
    """The test sales metadata plus the package's layouts and list views of those objects."""
    batch = metadata()
    components = yaml.safe_load(UI_COMPONENTS.read_text())["components"]
    for kind, key in (("layout", "layouts"), ("list_view", "list_views")):
        batch[key] = [
            c["definition"]
            for c in components
            if c["kind"] == kind and c["definition"]["object"] in SALES
        ]
    account = next(o for o in batch["objects"] if o["api_name"] == "Account")
    for f in account["fields"]:
        if f["api_name"] == "Phone":
            f["track_history"] = True  # the record page shows its history
    for layout in batch["layouts"]:
        layout["related_lists"] = [n for n in layout.get("related_lists", []) if n in SALES]
    return batch


@asynccontextmanager
async def _maybe(wanted: bool, app: Any) -> AsyncIterator[None]:
    if not wanted:
        yield
        return
    async with serving(app):
        yield


@asynccontextmanager
async def ui_stack(
    backend: Backend, var_dir: Path, *, worker: bool = False
) -> AsyncIterator[UiStack]:
    """With `worker`, a runtime-worker too (CSV imports run there)."""
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    await bootstrap_first_admin(sessions, password=ADMIN_PASSWORD)
    async with unit_of_work(sessions, readonly=True) as session:
        org_id = await admin.deployment_org_id(IdentityRepository(session))
    await apply_metadata(engine, org_id=org_id, raw=sales_metadata())
    user_ids = {}
    for username, permission_set in USERS:
        created = await admin.create_user(
            sessions,
            username=username,
            password=PASSWORD,
            email=f"{username}@example.com",
            display_name=username.title(),
            is_admin=False,
        )
        user_ids[username] = created.user_id
        async with unit_of_work(sessions) as session:
            await assign_permission_set(
                session,
                org_id=org_id,
                user_id=created.user_id,
                permission_set=permission_set or "Sfcrm_Test_Read_Only",
            )
    ensure_local_secrets(var_dir, [WORKLOAD, "catalog", "integration", "gateway"])
    runtime_settings = load_settings(
        var_dir=var_dir,
        runtime_database_url=backend.url(LogicalService.RUNTIME),
        max_security_staleness_seconds=STALENESS,
    )
    try:
        async with (
            serving(create_api_app(runtime_settings)) as runtime_url,
            _maybe(worker, create_worker_app(runtime_settings)),
        ):
            sfcrm_settings = load_settings(var_dir=var_dir, runtime_api_url=runtime_url)
            async with serving(create_app(sfcrm_settings)) as sfcrm_url:
                stack = UiStack(
                    runtime_url=runtime_url,
                    sfcrm_url=sfcrm_url,
                    org_id=org_id,
                    sessions=sessions,
                    engine=engine,
                    user_ids=user_ids,
                )
                for username, _ in USERS:
                    stack.tokens[username] = await stack.token(username, PASSWORD)
                stack.tokens["admin"] = await stack.token("admin", ADMIN_PASSWORD)
                yield stack
    finally:
        await engine.dispose()
