"""Outbound endpoint bindings: the operator says where a flow's endpoint name delivers.

Metadata names endpoints, never URLs (seed: no arbitrary endpoint URLs declared by
metadata); an operator binds a name to a URL and a secret reference
(`nexus admin set-outbound-endpoint`). The signing secret itself lives in the secrets store
(`nexus hooks set-secret REF`). Every change is written to the operator audit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.contracts.errors import BadRequest, NotFound
from nexus.platform.db.clock import db_now_ms
from nexus.platform.secrets import WEBHOOK_SECRET_REF
from nexus.runtime.admin.repository import AuditRepository
from nexus.runtime.metadata.definitions import ENDPOINT_NAME
from nexus.runtime.outbox import models as m

MAX_URL = 2048


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str
    secret_ref: str
    active: bool


def _checked(name: str, url: str, secret_ref: str) -> None:
    if not re.fullmatch(ENDPOINT_NAME, name):
        raise BadRequest("an endpoint name is 1-64 of [A-Za-z0-9._-], starting alphanumeric")
    if not WEBHOOK_SECRET_REF.fullmatch(secret_ref):
        raise BadRequest("a secret reference is 1-64 of [A-Za-z0-9._-]")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise BadRequest("the URL is malformed") from None
    if parsed.scheme not in ("http", "https") or not parsed.host or len(url) > MAX_URL:
        raise BadRequest(f"the URL must be http:// or https:// with a host (max {MAX_URL})")


def display_url(url: str) -> str:
    """The URL without credentials (for listings; logs name the endpoint only)."""
    parsed = httpx.URL(url)
    masked = parsed.copy_with(password="***")  # noqa: S106 - a mask, not a credential
    return str(masked) if parsed.password else url


async def _audit(conn: AsyncConnection, org_id: str, actor: str, action: str, name: str) -> None:
    await AuditRepository(conn).record(
        org_id=org_id, actor=actor, action=action, target=f"outbound_endpoint:{name}"
    )


async def set_endpoint(
    conn: AsyncConnection, *, org_id: str, name: str, url: str, secret_ref: str, actor: str
) -> bool:
    """Bind (or rebind, and re-activate) `name`; True when it is new."""
    _checked(name, url, secret_ref)
    t = m.outbound_endpoint
    values = {"url": url, "secret_ref": secret_ref, "active": True, "updated_at_ms": db_now_ms()}
    changed = await conn.execute(
        update(t).where(t.c.org_id == org_id, t.c.name == name).values(**values)
    )
    if changed.rowcount == 0:
        await conn.execute(insert(t).values(org_id=org_id, name=name, **values))
    await _audit(conn, org_id, actor, "set_endpoint", name)
    return changed.rowcount == 0


async def disable_endpoint(conn: AsyncConnection, *, org_id: str, name: str, actor: str) -> None:
    t = m.outbound_endpoint
    changed = await conn.execute(
        update(t)
        .where(t.c.org_id == org_id, t.c.name == name)
        .values(active=False, updated_at_ms=db_now_ms())
    )
    if changed.rowcount == 0:
        raise NotFound(f"no outbound endpoint {name!r}")
    await _audit(conn, org_id, actor, "disable_endpoint", name)


async def list_endpoints(conn: AsyncConnection, *, org_id: str) -> list[Endpoint]:
    t = m.outbound_endpoint
    rows = await conn.execute(
        select(t.c.name, t.c.url, t.c.secret_ref, t.c.active)
        .where(t.c.org_id == org_id)
        .order_by(t.c.name)
    )
    return [Endpoint(r[0], r[1], r[2], bool(r[3])) for r in rows]


async def find_endpoint(conn: AsyncConnection, *, org_id: str, name: str) -> Endpoint | None:
    t = m.outbound_endpoint
    row = (
        await conn.execute(
            select(t.c.name, t.c.url, t.c.secret_ref, t.c.active).where(
                t.c.org_id == org_id, t.c.name == name
            )
        )
    ).first()
    return None if row is None else Endpoint(row[0], row[1], row[2], bool(row[3]))
