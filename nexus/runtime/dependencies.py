"""What Runtime's endpoints share: the lifetime caches (`RuntimeState`), one use case's unit of
work with its metadata view and the caller's access (`use_case`), the records capability, and
the System Administrator check (`require_admin`). Authorization is decided here, in Runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import Forbidden
from nexus.contracts.identity import TrustedCall
from nexus.identity.api import Directory, identity_state, internal_call
from nexus.platform.db.engine import unit_of_work
from nexus.platform.service_app import ServiceState
from nexus.runtime.access.service import AccessCache, CallerAccess
from nexus.runtime.metadata.view import MetadataCache, MetadataView


class RuntimeState:
    """What runtime-api holds for its lifetime: metadata and access caches."""

    def __init__(self) -> None:
        self.metadata = MetadataCache()
        self.access = AccessCache()


def runtime_state(request: Request) -> tuple[ServiceState, RuntimeState]:
    return request.app.state.service, request.app.state.runtime


@asynccontextmanager
async def use_case(
    request: Request, caller: TrustedCall, *, readonly: bool
) -> AsyncIterator[tuple[AsyncSession, MetadataView, CallerAccess]]:
    """One unit of work bound to one metadata view and the caller's access."""
    service, runtime = runtime_state(request)
    async with unit_of_work(service.sessions, readonly=readonly) as session:
        view = await runtime.metadata.view(session, caller.org_id)
        access = await runtime.access.for_caller(session, caller)
        yield session, view, access


#: A delegated call with the records capability (the dialect AppServices, the UI API).
RecordsCaller = Annotated[TrustedCall, Depends(internal_call("runtime.records"))]


async def require_admin(
    request: Request, caller: TrustedCall, *, what: str = "metadata administration"
) -> None:
    """Administration needs a System Administrator (decided here, in Runtime)."""
    sessions = identity_state(request).sessions
    async with unit_of_work(sessions, readonly=True) as session:
        user = await Directory(session).user(caller.org_id, caller.user_id)
    if user is None or not user["is_admin"]:
        raise Forbidden(f"{what} needs a System Administrator", code="INSUFFICIENT_ACCESS")
