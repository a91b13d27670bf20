"""Authorization, decided only here: object CRUD, field-level security and row access.

A caller's effective access is computed once per (org, user, SecurityEpoch) and cached: any
change to permission sets, assignments, sharing rules, roles or users advances the epoch, so a
cached decision is never older than the security staleness bound. Row access is expressed as
one SQL predicate per object (ownership, role hierarchy, sharing rules, master-detail parent),
so whole batches are decided in the statement that reads them: no per-record queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, false, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import NotFound
from nexus.contracts.identity import TrustedCall
from nexus.identity.api import Directory
from nexus.platform.db.clock import read_now_ms
from nexus.runtime.access.repository import PermissionRepository
from nexus.runtime.metadata.definitions import (
    FieldDef,
    ObjectDef,
    PermissionSetDef,
    SharingRuleDef,
)
from nexus.runtime.metadata.repository import MetadataRepository
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.schema.spec import column_name

Mode = Literal["read", "edit", "delete"]


@dataclass(frozen=True)
class ObjectAccess:
    create: bool = False
    read: bool = False
    edit: bool = False
    delete: bool = False
    view_all: bool = False
    modify_all: bool = False


FULL = ObjectAccess(True, True, True, True, True, True)


@dataclass(frozen=True)
class CallerAccess:
    org_id: str
    user_id: str
    is_admin: bool
    role_id: str | None
    permission_set_names: frozenset[str]
    visible_owner_ids: frozenset[str]  # the caller and everyone below them in the role hierarchy
    role_lineage: frozenset[str]  # the caller's role and every role above it
    role_names: dict[str, str]  # role name -> role id
    #: decisions already computed, keyed by metadata revision (a new revision, a new key)
    _memo: dict[tuple[object, ...], object] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def system(cls, org_id: str) -> CallerAccess:
        """The platform itself (formula inputs): every object, field and row of one org."""
        return cls(
            org_id=org_id,
            user_id="",
            is_admin=True,
            role_id=None,
            permission_set_names=frozenset(),
            visible_owner_ids=frozenset(),
            role_lineage=frozenset(),
            role_names={},
        )

    def _sets(self, view: MetadataView) -> list[PermissionSetDef]:
        return [
            view.permission_sets[n] for n in self.permission_set_names if n in view.permission_sets
        ]

    def object(self, view: MetadataView, obj: ObjectDef) -> ObjectAccess:
        key = ("object", view.revision, obj.api_name)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._object(view, obj)
        return cached  # type: ignore[return-value]  # stored by this method only

    def _object(self, view: MetadataView, obj: ObjectDef) -> ObjectAccess:
        if self.is_admin:
            return FULL
        grants = [
            p
            for s in self._sets(view)
            for p in s.objects
            if p.object.lower() == obj.api_name.lower()
        ]
        sets = self._sets(view)
        view_all = any(s.view_all_data for s in sets)
        modify_all = any(s.modify_all_data for s in sets)
        return ObjectAccess(
            create=any(g.create for g in grants),
            read=view_all or any(g.read for g in grants),
            edit=modify_all or any(g.edit for g in grants),
            delete=modify_all or any(g.delete for g in grants),
            view_all=view_all or modify_all or any(g.view_all for g in grants),
            modify_all=modify_all or any(g.modify_all for g in grants),
        )

    def field(self, view: MetadataView, obj: ObjectDef, field: FieldDef) -> tuple[bool, bool]:
        """(readable, editable) for this caller; never more than the object allows."""
        key = ("field", view.revision, obj.api_name, field.api_name)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._field(view, obj, field)
        return cached  # type: ignore[return-value]  # stored by this method only

    def _field(self, view: MetadataView, obj: ObjectDef, field: FieldDef) -> tuple[bool, bool]:
        access = self.object(view, obj)
        if not access.read:
            return False, False
        writable = access.edit or access.create
        if self.is_admin or field.api_name == "Name":
            return True, writable and field.type not in ("auto_number", "formula")
        read = edit = False
        qualified = f"{obj.api_name}.{field.api_name}".lower()
        for pset in self._sets(view):
            for perm in pset.objects:
                if perm.object.lower() == obj.api_name.lower():
                    read = read or perm.all_fields in ("read", "edit")
                    edit = edit or perm.all_fields == "edit"
            for fperm in pset.fields:
                if fperm.field.lower() == qualified:
                    read = read or fperm.read
                    edit = edit or fperm.edit
        editable = edit and writable and field.type not in ("auto_number", "formula")
        return read, editable

    def readable_fields(self, view: MetadataView, obj: ObjectDef) -> list[FieldDef]:
        return [f for f in obj.all_fields() if self.field(view, obj, f)[0]]

    def row_predicate(
        self, view: MetadataView, obj: ObjectDef, mode: Mode = "read", depth: int = 0
    ) -> ColumnElement[bool]:
        """Which rows of `obj` the caller may read / edit / delete, as one SQL predicate."""
        access = self.object(view, obj)
        if not access.read:
            return false()
        if obj.sharing_model == "ControlledByParent" and not _unrestricted(access, obj, mode):
            return self._parent_predicate(view, obj, mode, depth)
        if _unrestricted(access, obj, mode):
            return true()
        table = view.table(obj)
        owned = table.c.owner_id.in_(sorted(self.visible_owner_ids))
        if mode == "delete":
            return owned
        shared = [
            _criteria(table, rule)
            for rule in view.sharing_rules
            if rule.active
            and rule.object.lower() == obj.api_name.lower()
            and (mode == "read" or rule.access == "Edit")
            and self._receives(rule)
        ]
        return or_(owned, *shared) if shared else owned

    def _receives(self, rule: SharingRuleDef) -> bool:
        target = self.role_names.get(rule.share_with_role)
        if target is None or self.role_id is None:
            return False
        return self.role_id == target or (rule.include_subordinates and target in self.role_lineage)

    def _parent_predicate(
        self, view: MetadataView, obj: ObjectDef, mode: Mode, depth: int
    ) -> ColumnElement[bool]:
        master = next(f for f in obj.fields if f.type == "master_detail")
        parent = view.object(master.reference_to or "")
        if parent is None or depth > 3:
            return false()
        parent_table = view.table(parent)
        parent_mode: Mode = "read" if mode == "read" else "edit"
        allowed = select(parent_table.c.id).where(
            parent_table.c.org_id == self.org_id,
            self.row_predicate(view, parent, parent_mode, depth + 1),
        )
        return view.table(obj).c[column_name(master.api_name)].in_(allowed)


def _unrestricted(access: ObjectAccess, obj: ObjectDef, mode: Mode) -> bool:
    """Whether every row qualifies: View/Modify All, or a public org-wide default."""
    if mode == "read":
        return access.view_all or obj.sharing_model in ("Read", "ReadWrite")
    if mode == "edit":
        return access.modify_all or obj.sharing_model == "ReadWrite"
    return access.modify_all


def _criteria(table: Any, rule: SharingRuleDef) -> ColumnElement[bool]:
    clauses = []
    for criterion in rule.criteria:
        column = table.c[column_name(criterion.field)]
        value = criterion.value
        if criterion.operator == "in":
            values = list(value) if isinstance(value, tuple) else [value]
            clauses.append(column.in_(values))
        elif criterion.operator == "not_equals":
            clauses.append(or_(column.is_(None), column != value))
        else:
            clauses.append(column == value)
    return and_(*clauses)


class AccessCache:
    """Per process; entries are keyed by SecurityEpoch, so they never outlive a change."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, int], CallerAccess] = {}

    async def for_caller(self, session: AsyncSession, caller: TrustedCall) -> CallerAccess:
        key = (caller.org_id, caller.user_id, caller.security_epoch)
        cached = self._entries.get(key)
        if cached is not None:
            return cached
        access = await load_access(session, caller.org_id, caller.user_id)
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key] = access
        return access


async def load_access(session: AsyncSession, org_id: str, user_id: str) -> CallerAccess:
    directory = Directory(session)
    user = await directory.user(org_id, user_id)
    assigned = await PermissionRepository(session).permission_sets(org_id, user_id)
    roles = {
        row["role_id"]: (row["name"], row["parent_role_id"])
        for row in await directory.roles(org_id)
    }
    role_id = user["role_id"] if user else None
    below = _descendants(roles, role_id)
    subordinates = await directory.users_in_roles(org_id, sorted(below)) if below else set()
    return CallerAccess(
        org_id=org_id,
        user_id=user_id,
        is_admin=bool(user and user["is_admin"]),
        role_id=role_id,
        permission_set_names=frozenset(assigned),
        visible_owner_ids=frozenset({user_id, *subordinates}),
        role_lineage=frozenset(_ancestors(roles, role_id)),
        role_names={name: rid for rid, (name, _) in roles.items()},
    )


def _descendants(roles: dict[str, tuple[str, str | None]], role_id: str | None) -> set[str]:
    if role_id is None:
        return set()
    found: set[str] = set()
    frontier = {role_id}
    while frontier:
        children = {rid for rid, (_, parent) in roles.items() if parent in frontier} - found
        found |= children
        frontier = children
    return found


def _ancestors(roles: dict[str, tuple[str, str | None]], role_id: str | None) -> set[str]:
    lineage: set[str] = set()
    current = role_id
    while current is not None and current not in lineage:
        lineage.add(current)
        current = roles.get(current, ("", None))[1]
    return lineage


async def assign_permission_set(
    session: AsyncSession, *, org_id: str, user_id: str, permission_set: str, assigned: bool = True
) -> None:
    """Assign (or remove) one permission set; a change advances the SecurityEpoch, so every
    cached decision of the org is recomputed (security-critical)."""
    active = {
        r["name"].lower()
        for r in await MetadataRepository(session).active_definitions(org_id, "permission_set")
    }
    name = permission_set.lower()
    if name not in active:
        raise NotFound(f"no permission set named {permission_set!r}")
    directory = Directory(session)
    if await directory.user(org_id, user_id) is None:
        raise NotFound("no such user")
    assignments = PermissionRepository(session)
    if assigned:
        now_ms = await read_now_ms(session)
        changed = await assignments.assign(
            org_id=org_id, user_id=user_id, permission_set=name, now_ms=now_ms
        )
    else:
        changed = await assignments.remove(org_id=org_id, user_id=user_id, permission_set=name)
    if changed:
        await directory.advance_security_epoch(org_id)
