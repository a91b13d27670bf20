"""Runtime's public admin API (`/admin/v1/runtime/...`, routed by the gateway): users,
Connected Apps, sessions, the inbox/outbox dead letters and online metadata.

Runtime is the decider: the bearer access token is validated here and only a System
Administrator passes (`require_admin`). Every action writes `runtime_operator_audit` in the
same transaction (who, what, on which target; never a password, secret or payload). The
operations are identity's service functions (what `nexus admin ...` runs) and the work
engine's operator functions (ADR 0040).
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, NotFound
from nexus.contracts.identity import TrustedCall
from nexus.identity.api import (
    ADMIN,
    Directory,
    UnknownUser,
    client_lists,
    identity_state,
    require_scope,
    trusted_call,
)
from nexus.platform.db.engine import unit_of_work
from nexus.platform.service_app import ServiceState
from nexus.platform.workqueue import operate
from nexus.runtime.access.repository import PermissionRepository
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.admin.repository import AuditRepository
from nexus.runtime.dependencies import require_admin
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.metadata.definitions import InvalidMetadata, LayoutDef, PermissionSetDef
from nexus.runtime.metadata.repository import MetadataRepository
from nexus.runtime.metadata.service import active_objects, apply_metadata
from nexus.runtime.outbox import models as outbox_tables

router = APIRouter(prefix="/admin/v1/runtime")
QUEUES = {"inbox": inbox_tables.inbox, "outbox": outbox_tables.outbox}


async def administrator(
    request: Request, caller: Annotated[TrustedCall, Depends(trusted_call)]
) -> TrustedCall:
    """The signed-in System Administrator with an `admin`-scoped token (401 without a valid
    token, 403 for anyone else)."""
    require_scope(caller, (ADMIN,), what="the Runtime admin API")
    await require_admin(request, caller, what="the Runtime admin console")
    return caller


Admin = Annotated[TrustedCall, Depends(administrator)]


def _sessions(request: Request) -> Any:
    return identity_state(request).sessions


async def audit(
    session: AsyncSession, caller: TrustedCall, action: str, target: str, outcome: str = "ok"
) -> None:
    await AuditRepository(session).record(
        org_id=caller.org_id, actor=caller.user_id, action=action, target=target, outcome=outcome
    )


# ---------------------------------------------------------------------------- users


@router.get("/users")
async def list_users(request: Request, caller: Admin) -> dict[str, Any]:
    async with unit_of_work(_sessions(request), readonly=True) as session:
        directory = Directory(session)
        roles = {r["role_id"]: r["name"] for r in await directory.roles(caller.org_id)}
        sets = await PermissionRepository(session).assignments(caller.org_id)
        labels = {
            r["name"].lower(): PermissionSetDef.model_validate_json(r["body"]).api_name
            for r in await MetadataRepository(session).active_definitions(
                caller.org_id, "permission_set"
            )
        }
        users = [
            {
                "userId": r["user_id"],
                "username": r["username"],
                "email": r["email"],
                "displayName": r["display_name"],
                "isActive": bool(r["is_active"]),
                "isAdmin": bool(r["is_admin"]),
                "role": roles.get(r["role_id"]) if r["role_id"] else None,
                "permissionSets": sorted(labels.get(p, p) for p in sets.get(r["user_id"], [])),
            }
            for r in await directory.users(caller.org_id)
        ]
    return {"users": users}


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=255)
    password: str | None = Field(default=None, max_length=256)
    email: str | None = Field(default=None, max_length=255)
    displayName: str | None = Field(default=None, max_length=255)
    isAdmin: bool = False
    role: str | None = Field(default=None, max_length=80)
    permissionSets: list[str] = Field(default_factory=list, max_length=50)


@router.post("/users", status_code=201)
async def create_user(request: Request, body: NewUser, caller: Admin) -> dict[str, Any]:
    generated = None if body.password else secrets.token_urlsafe(18)
    async with unit_of_work(_sessions(request)) as session:
        user_id = await Directory(session).create_user(
            org_id=caller.org_id,
            username=body.username,
            password=body.password or generated,
            email=body.email,
            display_name=body.displayName,
            is_admin=body.isAdmin,
            role_name=body.role,
        )
        for name in body.permissionSets:
            await assign_permission_set(
                session, org_id=caller.org_id, user_id=user_id, permission_set=name
            )
        await audit(session, caller, "user.create", f"user:{user_id}")
    return {
        "userId": user_id,
        "username": body.username.strip().lower(),
        "generatedPassword": generated,
    }


@router.post("/users/{user_id}/deactivate")
async def deactivate_user(request: Request, user_id: str, caller: Admin) -> dict[str, Any]:
    if user_id == caller.user_id:
        raise BadRequest("you cannot deactivate yourself", code="INVALID_OPERATION")
    async with unit_of_work(_sessions(request)) as session:
        await Directory(session).set_user_active(
            org_id=caller.org_id, user_id=user_id, active=False
        )
        await audit(session, caller, "user.deactivate", f"user:{user_id}")
    return {"userId": user_id, "isActive": False}


class NewPassword(BaseModel):
    model_config = ConfigDict(extra="forbid")

    password: str | None = Field(default=None, max_length=256)


@router.post("/users/{user_id}/password")
async def reset_password(
    request: Request, user_id: str, body: NewPassword, caller: Admin
) -> dict[str, Any]:
    """A new password (generated when none is given); the user's sessions end."""
    generated = None if body.password else secrets.token_urlsafe(18)
    password = body.password or generated or ""
    async with unit_of_work(_sessions(request)) as session:
        await Directory(session).reset_password(
            org_id=caller.org_id, user_id=user_id, password=password
        )
        await audit(session, caller, "user.reset_password", f"user:{user_id}")
    return {"userId": user_id, "generatedPassword": generated}


class PermissionSets(BaseModel):
    model_config = ConfigDict(extra="forbid")

    permissionSets: list[str] = Field(max_length=100)


@router.put("/users/{user_id}/permission-sets")
async def set_permission_sets(
    request: Request, user_id: str, body: PermissionSets, caller: Admin
) -> dict[str, Any]:
    """The user's complete list of permission sets (added and removed to match)."""
    wanted = {name.lower() for name in body.permissionSets}
    async with unit_of_work(_sessions(request)) as session:
        await Directory(session).existing_user(caller.org_id, user_id)
        held = await PermissionRepository(session).permission_sets(caller.org_id, user_id)
        for name in sorted(wanted | held):
            await assign_permission_set(
                session,
                org_id=caller.org_id,
                user_id=user_id,
                permission_set=name,
                assigned=name in wanted,
            )
        await audit(
            session, caller, "user.permission_sets", f"user:{user_id}:{','.join(sorted(wanted))}"
        )
    return {"userId": user_id, "permissionSets": sorted(body.permissionSets)}


class RoleChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str | None = Field(default=None, max_length=80)


@router.put("/users/{user_id}/role")
async def set_role(
    request: Request, user_id: str, body: RoleChange, caller: Admin
) -> dict[str, Any]:
    async with unit_of_work(_sessions(request)) as session:
        await Directory(session).set_user_role(  # sharing follows the role at once
            org_id=caller.org_id, user_id=user_id, role_name=body.role
        )
        await audit(session, caller, "user.role", f"user:{user_id}:{body.role or ''}")
    return {"userId": user_id, "role": body.role}


@router.get("/permission-sets")
async def list_permission_sets(request: Request, caller: Admin) -> dict[str, Any]:
    async with unit_of_work(_sessions(request), readonly=True) as session:
        rows = await MetadataRepository(session).active_definitions(caller.org_id, "permission_set")
    sets = [PermissionSetDef.model_validate_json(r["body"]) for r in rows]
    return {"permissionSets": [{"apiName": s.api_name, "label": s.label} for s in sets]}


@router.get("/roles")
async def list_roles(request: Request, caller: Admin) -> dict[str, Any]:
    async with unit_of_work(_sessions(request), readonly=True) as session:
        rows = await Directory(session).roles(caller.org_id)
    names = {r["role_id"]: r["name"] for r in rows}
    return {
        "roles": [
            {"name": r["name"], "parent": names.get(r["parent_role_id"])}
            for r in sorted(rows, key=lambda r: r["name"])
        ]
    }


# ---------------------------------------------------------------------------- connected apps


def _client(row: Any) -> dict[str, Any]:
    redirect_uris, grant_types, scopes = client_lists(row)
    return {
        "clientId": row["client_id"],
        "name": row["name"],
        "public": row["secret_hash"] is None,
        "enabled": bool(row["is_enabled"]),
        "grantTypes": grant_types,
        "scopes": scopes,
        "redirectUris": redirect_uris,
    }


@router.get("/connected-apps")
async def list_connected_apps(request: Request, caller: Admin) -> dict[str, Any]:
    async with unit_of_work(_sessions(request), readonly=True) as session:
        rows = await Directory(session).clients(caller.org_id)
    return {"connectedApps": [_client(r) for r in rows]}


class NewConnectedApp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255)
    redirectUris: list[str] = Field(default_factory=list, max_length=20)
    grantTypes: list[str] = Field(
        default_factory=lambda: ["authorization_code", "refresh_token"], max_length=10
    )
    scopes: list[str] = Field(default_factory=lambda: ["api", "refresh_token"], max_length=20)
    public: bool = False
    runAsUsername: str | None = Field(default=None, max_length=255)


@router.post("/connected-apps", status_code=201)
async def create_connected_app(
    request: Request, body: NewConnectedApp, caller: Admin
) -> JSONResponse:
    async with unit_of_work(_sessions(request)) as session:
        directory = Directory(session)
        run_as_id = None
        if body.runAsUsername:
            run_as = await directory.user_by_username(body.runAsUsername)
            if run_as is None or run_as["org_id"] != caller.org_id:
                raise UnknownUser(f"no user {body.runAsUsername!r}")
            run_as_id = run_as["user_id"]
        created = await directory.create_client(
            org_id=caller.org_id,
            name=body.name,
            redirect_uris=body.redirectUris,
            grant_types=body.grantTypes,
            scopes=body.scopes,
            run_as_user_id=run_as_id,
            confidential=not body.public,
        )
        await audit(session, caller, "connected_app.create", f"client:{created.client_id}")
        row = await directory.client(created.client_id)
    shown = {**_client(row), "clientSecret": created.client_secret}
    return JSONResponse(shown, status_code=201, headers={"Cache-Control": "no-store"})


@router.post("/connected-apps/{client_id}/disable")
async def disable_connected_app(request: Request, client_id: str, caller: Admin) -> dict[str, Any]:
    async with unit_of_work(_sessions(request)) as session:
        await Directory(session).disable_client(org_id=caller.org_id, client_id=client_id)
        await audit(session, caller, "connected_app.disable", f"client:{client_id}")
    return {"clientId": client_id, "enabled": False}


# ---------------------------------------------------------------------------- sessions


@router.get("/users/{user_id}/sessions")
async def list_sessions(request: Request, user_id: str, caller: Admin) -> dict[str, Any]:
    """The user's live sessions (never a token)."""
    async with unit_of_work(_sessions(request), readonly=True) as session:
        directory = Directory(session)
        await directory.existing_user(caller.org_id, user_id)
        sessions = [
            {
                "sessionId": r["session_id"],
                "clientId": r["client_id"],
                "authMethod": r["auth_method"],
                "createdAtMs": int(r["created_at_ms"]),
                "expiresAtMs": int(r["expires_at_ms"]),
            }
            for r in await directory.live_sessions(caller.org_id, user_id)
        ]
    return {"sessions": sessions}


@router.post("/sessions/{session_id}/revoke")
async def revoke_session(request: Request, session_id: str, caller: Admin) -> dict[str, Any]:
    async with unit_of_work(_sessions(request)) as session:
        revoked = await Directory(session).revoke(
            org_id=caller.org_id,
            reason="admin_revoked",
            session_id=session_id,
        )
        await audit(
            session,
            caller,
            "session.revoke",
            f"session:{session_id}",
            outcome="ok" if revoked else "noop",
        )
    return {"sessionId": session_id, "revoked": bool(revoked)}


# ---------------------------------------------------------------------------- dead letters

Queue = Literal["inbox", "outbox"]


@router.get("/dead-letters")
async def dead_letters(
    request: Request, caller: Admin, queue: Queue = "inbox", limit: int = 50
) -> dict[str, Any]:
    """Parked (dead or outcome-unknown) commands or after-save actions, newest parking order;
    `error` is the sanitized class and message recorded at the failure."""
    service: ServiceState = request.app.state.service
    async with service.engine.connect() as conn:
        parked = await operate.list_parked(
            conn, QUEUES[queue], org_id=caller.org_id, limit=max(1, min(limit, 500))
        )
    return {
        "deadLetters": [
            {
                "id": p.id,
                "queue": queue,
                "family": p.family,
                "queueClass": p.queue_class,
                "state": p.state,
                "attempts": p.attempt,
                "failureClass": p.failure_class,
                "error": p.error,
                "createdAtMs": p.created_at,
                "deadAtMs": p.finished_at,
                "laneKey": p.lane_key,
                "halting": p.halting,
            }
            for p in parked
        ]
    }


class Replay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue: Queue = "inbox"
    ids: list[str] = Field(min_length=1, max_length=operate.MAX_BATCH)


@router.post("/dead-letters/replay")
async def replay_dead_letters(request: Request, body: Replay, caller: Admin) -> dict[str, Any]:
    service: ServiceState = request.app.state.service
    async with service.engine.begin() as conn:
        done = await operate.replay(conn, QUEUES[body.queue], body.ids, org_id=caller.org_id)
        audit_log = AuditRepository(conn)
        for item_id in done.done:
            await audit_log.record(
                org_id=caller.org_id,
                actor=caller.user_id,
                action="replay",
                target=f"{body.queue}:{item_id}",
            )
    return {"replayed": done.done, "refused": {r.id: r.reason for r in done.refused}}


# ---------------------------------------------------------------------------- metadata


class NewField(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: str = Field(min_length=1, max_length=80)
    field: dict[str, Any]
    addToLayout: bool = False  # also the last section of the object's layout (its forms)


class NewObject(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: dict[str, Any]


async def _apply(request: Request, caller: TrustedCall, raw: dict[str, Any], what: str) -> int:
    service: ServiceState = request.app.state.service
    try:
        result = await apply_metadata(service.engine, org_id=caller.org_id, raw=raw)
    except InvalidMetadata as exc:
        raise BadRequest(
            "the metadata is invalid; nothing was applied",
            code="INVALID_METADATA",
            fields={p.path: p.message for p in exc.problems[:50]},
        ) from None
    async with unit_of_work(service.sessions) as session:
        await audit(session, caller, "metadata.apply", what)
    return result.metadata_revision


@router.post("/metadata/fields", status_code=201)
async def add_field(request: Request, body: NewField, caller: Admin) -> dict[str, Any]:
    """A new field on an existing object, as Runtime domain config (no package)."""
    service: ServiceState = request.app.state.service
    async with unit_of_work(service.sessions, readonly=True) as session:
        objects = await active_objects(MetadataRepository(session), caller.org_id)
    current = objects.get(body.object.lower())
    if current is None:
        raise NotFound(f"no object named {body.object!r}")
    name = str(body.field.get("api_name", ""))
    if any(f.api_name.lower() == name.lower() for f in current.all_fields()):
        raise BadRequest(f"{current.api_name} already has a field {name!r}", code="DUPLICATE")
    definition = current.model_dump(mode="json", exclude_none=True)
    definition["fields"] = [*definition.get("fields", []), body.field]
    raw: dict[str, Any] = {"objects": [definition]}
    if body.addToLayout:
        async with unit_of_work(service.sessions, readonly=True) as session:
            layouts = await MetadataRepository(session).active_definitions(caller.org_id, "layout")
        raw["layouts"] = [
            _with_field(layout, name)
            for layout in (LayoutDef.model_validate_json(r["body"]) for r in layouts)
            if layout.object.lower() == current.api_name.lower()
        ]
    revision = await _apply(request, caller, raw, f"field:{current.api_name}.{name}")
    return {"object": current.api_name, "field": name, "metadataRevision": revision}


def _with_field(layout: LayoutDef, field: str) -> dict[str, Any]:
    """The layout with `field` appended to its last section."""
    body = layout.model_dump(mode="json", exclude_none=True)
    body["sections"][-1]["fields"] = [*body["sections"][-1]["fields"], field]
    return body


@router.post("/metadata/objects", status_code=201)
async def add_object(request: Request, body: NewObject, caller: Admin) -> dict[str, Any]:
    """A new custom object, as Runtime domain config (no package)."""
    name = str(body.object.get("api_name", ""))
    service: ServiceState = request.app.state.service
    async with unit_of_work(service.sessions, readonly=True) as session:
        objects = await active_objects(MetadataRepository(session), caller.org_id)
    if name.lower() in objects:
        raise BadRequest(f"an object named {name!r} exists", code="DUPLICATE")
    revision = await _apply(request, caller, {"objects": [body.object]}, f"object:{name}")
    return {"object": name, "metadataRevision": revision}
