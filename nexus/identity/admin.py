"""Operator commands behind `nexus admin ...`, each one unit of work on the Runtime database."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.identity import service
from nexus.identity.errors import InvalidIdentityInput, UnknownUser
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import unit_of_work


@dataclass(frozen=True)
class CreatedUser:
    user_id: str
    username: str
    generated_password: str | None


async def deployment_org_id(repo: IdentityRepository) -> str:
    """The org of this deployment (phase one runs one), for operator commands."""
    org = await repo.first_org()
    if org is None:
        raise InvalidIdentityInput("no org yet: start the stack once with `nexus up`")
    return str(org["org_id"])


async def create_user(
    sessions: async_sessionmaker[AsyncSession],
    *,
    username: str,
    password: str | None,
    email: str | None,
    display_name: str | None,
    is_admin: bool,
    role: str | None = None,
) -> CreatedUser:
    generated = None if password else secrets.token_urlsafe(18)
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        user_id = await service.create_user(
            repo,
            org_id=await deployment_org_id(repo),
            username=username,
            password=password or generated,
            email=email,
            display_name=display_name,
            is_admin=is_admin,
            role_name=role,
        )
    return CreatedUser(
        user_id=user_id, username=username.strip().lower(), generated_password=generated
    )


async def create_client(
    sessions: async_sessionmaker[AsyncSession],
    *,
    name: str,
    redirect_uris: list[str],
    grant_types: list[str],
    scopes: list[str],
    run_as_username: str | None,
    public: bool,
) -> service.NewClient:
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        org_id = await deployment_org_id(repo)
        run_as_id = None
        if run_as_username:
            run_as = await repo.user_by_username(run_as_username)
            if run_as is None or run_as["org_id"] != org_id:
                raise UnknownUser(f"no user {run_as_username!r}")
            run_as_id = run_as["user_id"]
        return await service.create_client(
            repo,
            org_id=org_id,
            name=name,
            redirect_uris=redirect_uris,
            grant_types=grant_types,
            scopes=scopes,
            run_as_user_id=run_as_id,
            confidential=not public,
        )


async def revoke_user(
    sessions: async_sessionmaker[AsyncSession], *, username: str, deactivate: bool
) -> int:
    """Revoke every session of the user (and deactivate them when asked)."""
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        user = await repo.user_by_username(username)
        if user is None:
            raise UnknownUser(f"no user {username!r}")
        if deactivate:
            await service.set_user_active(
                repo, org_id=user["org_id"], user_id=user["user_id"], active=False
            )
            return 0
        return await service.revoke(
            repo, org_id=user["org_id"], reason="admin_revoked", user_id=user["user_id"]
        )


async def list_clients(sessions: async_sessionmaker[AsyncSession]) -> list[dict[str, object]]:
    """Connected Apps of the org, without secrets (only their digests are stored anyway)."""
    async with unit_of_work(sessions, readonly=True) as session:
        repo = IdentityRepository(session)
        rows = await repo.clients(await deployment_org_id(repo))
    result = []
    for row in rows:
        redirect_uris, grant_types, scopes = service.client_lists(row)
        result.append(
            {
                "client_id": row["client_id"],
                "name": row["name"],
                "public": row["secret_hash"] is None,
                "enabled": bool(row["is_enabled"]),
                "grant_types": grant_types,
                "scopes": scopes,
                "redirect_uris": redirect_uris,
            }
        )
    return result


async def disable_client(sessions: async_sessionmaker[AsyncSession], *, client_id: str) -> None:
    """Disable a Connected App and revoke every session it opened."""
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        await service.disable_client(
            repo, org_id=await deployment_org_id(repo), client_id=client_id
        )


async def create_role(
    sessions: async_sessionmaker[AsyncSession], *, name: str, parent: str | None
) -> str:
    """A role in the org's role hierarchy (used by sharing rules), under `parent` if given."""
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        return await service.create_role(
            repo, org_id=await deployment_org_id(repo), name=name, parent=parent
        )
