"""Identity as the rest of Nexus uses it: the only identity module Runtime imports.

- Request dependencies: `trusted_call` (a bearer token, validated), `internal_call` and
  `workload_call` (a signed workload call, with or without a delegated user), `identity_state`;
  `require_scope` and the scope names (`scopes`: what a token lets its client reach).
- Wiring: `router` (the OAuth2 server and `/services/oauth2/...`, the partner SOAP API's
  `login`/`getUserInfo`/`logout` at `/services/Soap/u/...`), `identity_lifespan`.
- `Directory(session)`: users, roles, orgs and their SecurityEpoch, Connected Apps and sessions,
  inside the caller's unit of work (so Runtime's audit row commits with the change).
- `user_table`, `org_table` and `role_table`: read only, for the few Runtime queries that join a
  user in the same statement (a record's Owner.Name, a workload binding's run-as user) and the
  read-only system objects (User, Organization, UserRole) projected from them.

Identity's tables, repository and password hashing stay behind this module (import-linter
contract "identity keeps its tables, repository and passwords").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.identity import models, service, soap
from nexus.identity.admin import deployment_org_id
from nexus.identity.delegation import CAPABILITIES
from nexus.identity.endpoints import (
    WorkloadCall,
    identity_state,
    internal_call,
    trusted_call,
    workload_call,
)
from nexus.identity.endpoints import router as oauth_router
from nexus.identity.errors import UnknownUser
from nexus.identity.repository import IdentityRepository
from nexus.identity.scopes import ADMIN, require_scope
from nexus.identity.service import NewClient, client_lists
from nexus.identity.setup import identity_lifespan
from nexus.platform.db.clock import read_now_ms

__all__ = [
    "ADMIN",
    "CAPABILITIES",
    "Directory",
    "NewClient",
    "UnknownUser",
    "WorkloadCall",
    "client_lists",
    "identity_lifespan",
    "identity_state",
    "internal_call",
    "org_table",
    "require_scope",
    "role_table",
    "router",
    "trusted_call",
    "user_table",
    "workload_call",
]

#: Identity's HTTP surface: the OAuth2/OIDC endpoints and the partner SOAP API subset.
router = APIRouter()
router.include_router(oauth_router)
router.include_router(soap.router)

user_table = models.user
org_table = models.org
role_table = models.role


class Directory:
    """Identity's directory in one unit of work (`session`): lookups and the changes an
    administrator makes. Errors are identity's (`UnknownUser`, `InvalidIdentityInput`)."""

    def __init__(self, session: AsyncSession) -> None:
        self._repo = IdentityRepository(session)

    # ------------------------------------------------------------------ orgs
    async def first_org(self) -> RowMapping | None:
        return await self._repo.first_org()

    async def org(self, org_id: str) -> RowMapping | None:
        return await self._repo.org(org_id)

    async def deployment_org_id(self) -> str:
        """The org of this deployment (phase one runs one), for operator commands."""
        return await deployment_org_id(self._repo)

    async def advance_security_epoch(self, org_id: str) -> int:
        """Every cached authorization decision of the org is stale from now on."""
        return await self._repo.advance_security_epoch(org_id)

    async def advance_security_epoch_if_org(self, org_id: str) -> int | None:
        return await self._repo.advance_security_epoch_if_org(org_id)

    # ------------------------------------------------------------------ users
    async def user(self, org_id: str, user_id: str) -> RowMapping | None:
        return await self._repo.user(org_id, user_id)

    async def existing_user(self, org_id: str, user_id: str) -> RowMapping:
        """The user, or UnknownUser (404)."""
        user = await self._repo.user(org_id, user_id)
        if user is None:
            raise UnknownUser("no such user")
        return user

    async def user_by_username(self, username: str) -> RowMapping | None:
        return await self._repo.user_by_username(username)

    async def users(self, org_id: str) -> list[RowMapping]:
        return await self._repo.users(org_id)

    async def users_in_roles(self, org_id: str, role_ids: Sequence[str]) -> set[str]:
        return await self._repo.users_in_roles(org_id, role_ids)

    async def create_user(self, **values: Any) -> str:
        """`identity.service.create_user`: the new user's id."""
        return await service.create_user(self._repo, **values)

    async def set_user_active(self, *, org_id: str, user_id: str, active: bool) -> None:
        await service.set_user_active(self._repo, org_id=org_id, user_id=user_id, active=active)

    async def reset_password(self, *, org_id: str, user_id: str, password: str) -> None:
        await service.reset_password(self._repo, org_id=org_id, user_id=user_id, password=password)

    async def set_user_role(self, *, org_id: str, user_id: str, role_name: str | None) -> None:
        await service.set_user_role(self._repo, org_id=org_id, user_id=user_id, role_name=role_name)

    # ------------------------------------------------------------------ roles
    async def roles(self, org_id: str) -> list[RowMapping]:
        return await self._repo.roles(org_id)

    async def role_names(self, org_id: str) -> set[str]:
        return await self._repo.role_names(org_id)

    async def create_role(self, *, org_id: str, name: str, parent: str | None = None) -> str:
        return await service.create_role(self._repo, org_id=org_id, name=name, parent=parent)

    # ------------------------------------------------------------------ connected apps
    async def client(self, client_id: str) -> RowMapping | None:
        return await self._repo.client(client_id)

    async def clients(self, org_id: str) -> list[RowMapping]:
        return await self._repo.clients(org_id)

    async def create_client(self, **values: Any) -> NewClient:
        """`identity.service.create_client`: the id and the secret (shown once)."""
        return await service.create_client(self._repo, **values)

    async def disable_client(self, *, org_id: str, client_id: str) -> None:
        await service.disable_client(self._repo, org_id=org_id, client_id=client_id)

    # ------------------------------------------------------------------ sessions
    async def live_sessions(
        self, org_id: str, user_id: str, *, limit: int = 200
    ) -> list[RowMapping]:
        now = await read_now_ms(self._repo.session)
        return await self._repo.live_sessions(org_id, user_id, now_ms=now, limit=limit)

    async def revoke(
        self,
        *,
        org_id: str,
        reason: str,
        session_id: str | None = None,
        user_id: str | None = None,
        client_id: str | None = None,
    ) -> int:
        """Revoke the matching sessions; advances the SecurityEpoch."""
        return await service.revoke(
            self._repo,
            org_id=org_id,
            reason=reason,
            session_id=session_id,
            user_id=user_id,
            client_id=client_id,
        )
