"""Which user a workload's commands run as, per org (`nexus admin bind-workload`).

A command carries no user: the binding an administrator made decides, and the bound user's
permission sets and sharing decide what the command may do. No binding, an inactive user or
an unknown org refuses the command (403). A fresh stack gets one binding: the `integration`
workload runs as the user `integration` (no password, no permission sets until an
administrator grants the ones its routes need; ADR 0017).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.contracts.errors import BadRequest, NotFound
from nexus.identity.api import CAPABILITIES, Directory
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.inbox.repository import InboxRepository

COMMANDS_CAPABILITY = "runtime.commands"
INTEGRATION_WORKLOAD = "integration"
INTEGRATION_USERNAME = "integration"


def command_workloads() -> list[str]:
    return sorted(w for w, caps in CAPABILITIES.items() if COMMANDS_CAPABILITY in caps)


async def bind_workload(
    sessions: async_sessionmaker[AsyncSession], *, workload: str, username: str
) -> str:
    """Bind `workload`'s commands to the active user `username` (replacing a binding);
    returns the user id."""
    if workload not in command_workloads():
        known = ", ".join(command_workloads())
        raise BadRequest(f"workload {workload!r} cannot send commands (known: {known})")
    async with unit_of_work(sessions) as session:
        users = Directory(session)
        org_id = await users.deployment_org_id()
        user = await users.user_by_username(username)
        if user is None or user["org_id"] != org_id:
            raise NotFound(f"no user {username!r}")
        if not user["is_active"]:
            raise BadRequest(f"user {username!r} is inactive")
        await InboxRepository(session).set_binding(
            org_id=org_id,
            workload=workload,
            user_id=user["user_id"],
            now_ms=await read_now_ms(session),
        )
        return str(user["user_id"])


async def unbind_workload(sessions: async_sessionmaker[AsyncSession], *, workload: str) -> None:
    """Remove the binding: the workload's commands are refused (403) from now on."""
    async with unit_of_work(sessions) as session:
        org_id = await Directory(session).deployment_org_id()
        if not await InboxRepository(session).remove_binding(org_id=org_id, workload=workload):
            raise NotFound(f"workload {workload!r} is not bound")


async def list_bindings(sessions: async_sessionmaker[AsyncSession]) -> list[dict[str, Any]]:
    async with unit_of_work(sessions, readonly=True) as session:
        org_id = await Directory(session).deployment_org_id()
        rows = await InboxRepository(session).bindings(org_id)
    return [dict(r) for r in rows]


async def bootstrap_integration_binding(sessions: async_sessionmaker[AsyncSession]) -> str:
    """On a fresh stack (right after the first admin): the user `integration`, who cannot
    sign in and holds no permission set, bound to the `integration` workload."""
    async with unit_of_work(sessions) as session:
        users = Directory(session)
        org_id = await users.deployment_org_id()
        user_id = await users.create_user(
            org_id=org_id,
            username=INTEGRATION_USERNAME,
            password=None,
            display_name="Integration (webhook commands)",
        )
        await InboxRepository(session).set_binding(
            org_id=org_id,
            workload=INTEGRATION_WORKLOAD,
            user_id=user_id,
            now_ms=await read_now_ms(session),
        )
    return INTEGRATION_USERNAME
