"""Each system object as one SELECT of the caller's org (a derived table the query engine
filters, sorts and pages like a record table): Identity's users, org and roles read through
the `identity.api` tables, profiles and permission sets as literal rows from the metadata,
permission-set assignments from Runtime's assignment table.

No source selects a secret: password hashes, failed sign-ins, lockouts, sessions and tokens
are not columns of any of them (a test asserts it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    String,
    case,
    cast,
    false,
    func,
    literal,
    literal_column,
    null,
    select,
    type_coerce,
    union_all,
)
from sqlalchemy.sql import Select
from sqlalchemy.types import TypeEngine

from nexus.identity.api import org_table, role_table, user_table
from nexus.runtime.access.models import permission_assignment
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.system_objects.definitions import (
    ADMIN_PROFILE,
    GROUP,
    ORGANIZATION,
    PERMISSION_SET,
    PERMISSION_SET_ASSIGNMENT,
    PROFILE,
    RECORD_TYPE,
    STANDARD_PROFILE,
    USER,
    USER_ROLE,
    SystemObject,
    permission_set_id,
    profile_id,
)

#: Values Nexus has one answer for (no per-org setting exists behind them).
EDITION = "Enterprise Edition"
INSTANCE = "NEXUS"
ORG_TIME_ZONE = "GMT"  # Nexus stores and computes every date-time in UTC
ORG_LOCALE = "en_US"
_SQL_TYPES: dict[str, TypeEngine[Any]] = {"checkbox": Boolean(), "datetime": DateTime()}
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SUFFIX = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"


def _typed(obj: SystemObject, values: dict[str, Any]) -> list[Any]:
    """The object's columns in field order, `None` for what `values` lacks (typed nulls)."""
    columns = [values["org_id"].label("org_id")]
    for f in obj.fields:
        sql_type: TypeEngine[Any] = _SQL_TYPES.get(f.type, String())
        value = values.get(f.key)
        if value is None:
            value = type_coerce(null(), sql_type)
        columns.append(value.label(f.key))
    return columns


def _text(value: str | None) -> Any:
    return type_coerce(null(), String()) if value is None else literal(value, String())


def _flag(value: bool) -> Any:
    return literal(value, Boolean())


def from_ms(ms: Any, dialect: str) -> Any:
    """Identity's epoch milliseconds as a UTC date-time, in SQL (so SOQL can compare it)."""
    seconds = ms // 1000
    if dialect == "sqlite":
        return type_coerce(func.datetime(seconds, "unixepoch"), DateTime())
    epoch = cast(literal("1970-01-01 00:00:00"), DateTime())
    # TIMESTAMPADD on a DATETIME does not depend on the session's time zone (FROM_UNIXTIME does)
    return type_coerce(func.timestampadd(literal_column("SECOND"), seconds, epoch), DateTime())


def _user(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    u = user_table.c
    name = u.display_name
    space = func.instr(name, " ")
    at = func.instr(u.username, "@")
    local_part = case((at > 0, func.substr(u.username, 1, at - 1)), else_=u.username)
    values = {
        "org_id": u.org_id,
        "id": u.user_id,
        "username": u.username,
        "lastname": case((space > 0, func.substr(name, space + 1)), else_=name),
        "firstname": case((space > 0, func.substr(name, 1, space - 1)), else_=null()),
        "name": name,
        "email": u.email,
        "alias": func.substr(local_part, 1, 8),
        "isactive": u.is_active,
        "timezonesidkey": u.time_zone,
        "localesidkey": u.locale,
        "languagelocalekey": u.locale,
        "emailencodingkey": _text("UTF-8"),
        "profileid": case(
            (u.is_admin.is_(True), profile_id(org_id, ADMIN_PROFILE)),
            else_=profile_id(org_id, STANDARD_PROFILE),
        ),
        "userroleid": u.role_id,
        "usertype": _text("Standard"),
        "lastlogindate": from_ms(u.last_login_ms, dialect),
        "createddate": from_ms(u.created_at_ms, dialect),
        "lastmodifieddate": from_ms(u.updated_at_ms, dialect),
        "systemmodstamp": from_ms(u.updated_at_ms, dialect),
    }
    return select(*_typed(USER, values)).where(u.org_id == org_id)


def _organization(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    o = org_table.c
    values = {
        "org_id": o.org_id,
        "id": o.org_id,
        "name": o.name,
        "organizationtype": _text(EDITION),
        "instancename": _text(INSTANCE),
        "issandbox": _flag(False),
        "timezonesidkey": _text(ORG_TIME_ZONE),
        "defaultlocalesidkey": _text(ORG_LOCALE),
        "languagelocalekey": _text(ORG_LOCALE),
        "createddate": from_ms(o.created_at_ms, dialect),
    }
    return select(*_typed(ORGANIZATION, values)).where(o.org_id == org_id)


def _user_role(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    r = role_table.c
    values = {
        "org_id": r.org_id,
        "id": r.role_id,
        "name": r.name,
        "developername": func.replace(r.name, " ", "_"),
        "parentroleid": r.parent_role_id,
        "rollupdescription": r.name,
        "createddate": from_ms(r.created_at_ms, dialect),
    }
    return select(*_typed(USER_ROLE, values)).where(r.org_id == org_id)


def _rows(obj: SystemObject, org_id: str, rows: list[dict[str, Any]]) -> Select[Any]:
    """Literal rows (none: a typed empty SELECT) as the object's source."""
    org = literal(org_id, String())
    if not rows:
        return select(*_typed(obj, {"org_id": org})).where(false())
    selects = [select(*_typed(obj, {"org_id": org, **row})) for row in rows]
    if len(selects) == 1:
        return selects[0]
    return select(*union_all(*selects).subquery().c)


def _profile(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    rows = [
        {
            "id": _text(profile_id(org_id, name)),
            "name": _text(name),
            "usertype": _text("Standard"),
            "description": _text(description),
            "permissionsapienabled": _flag(True),
            "permissionsviewalldata": _flag(admin),
            "permissionsmodifyalldata": _flag(admin),
        }
        for name, admin, description in (
            (ADMIN_PROFILE, True, "Nexus administrators: every object, field and record"),
            (STANDARD_PROFILE, False, "Access comes from the assigned permission sets"),
        )
    ]
    return _rows(PROFILE, org_id, rows)


def _permission_set(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    rows = [
        {
            "id": _text(permission_set_id(org_id, p.api_name)),
            "name": _text(p.api_name),
            "label": _text(p.label),
            "isownedbyprofile": _flag(False),
            "type": _text("Regular"),
            "permissionsviewalldata": _flag(p.view_all_data or p.modify_all_data),
            "permissionsmodifyalldata": _flag(p.modify_all_data),
        }
        for p in sorted(view.permission_sets.values(), key=lambda p: p.api_name.lower())
    ]
    return _rows(PERMISSION_SET, org_id, rows)


def _base62_index(char: Any, dialect: str) -> Any:
    """The base62 value (0-61) of one id character, case-sensitively on every backend."""
    code = func.unicode(char) if dialect == "sqlite" else func.ascii(char)
    return case((code < 58, code - 48), (code < 91, code - 55), else_=code - 61)


def _permission_set_assignment(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    """The stored assignments of the permission sets the metadata defines. The id is
    `definitions.assignment_id` in SQL: per character the base62 sum of the user's and the
    permission set's, then the case-safe suffix from which sums are capital letters."""
    a = permission_assignment.c
    names = {
        p.api_name.lower(): permission_set_id(org_id, p.api_name)
        for p in view.permission_sets.values()
    }
    if not names:
        return _rows(PERMISSION_SET_ASSIGNMENT, org_id, [])
    pairs = select(
        a.org_id,
        a.user_id.label("assigneeid"),
        case(
            *((a.permission_set == n, literal(i, String())) for n, i in sorted(names.items()))
        ).label("permissionsetid"),
        a.assigned_at_ms,
    ).where(a.org_id == org_id, a.permission_set.in_(sorted(names)))
    joined = pairs.subquery("assignments")
    sums = select(
        joined,
        *(
            (
                (
                    _base62_index(func.substr(joined.c.assigneeid, 4 + i, 1), dialect)
                    + _base62_index(func.substr(joined.c.permissionsetid, 4 + i, 1), dialect)
                )
                % 62
            ).label(f"s{i}")
            for i in range(12)
        ),
    ).subquery("assignment_sums")
    digits = [sums.c[f"s{i}"] for i in range(12)]
    chars = [func.substr(literal(_BASE62, String()), d + 1, 1) for d in digits]

    def upper(position: int) -> Any:
        return case((digits[position].between(10, 35), 1 << ((position + 3) % 5)), else_=0)

    # the key prefix 0Pa has one capital, its second character (bit 1 of the first chunk)
    chunks = [
        2 + upper(0) + upper(1),
        sum(upper(i) for i in range(2, 7)),
        sum(upper(i) for i in range(7, 12)),
    ]
    suffix = [func.substr(literal(_SUFFIX, String()), bits + 1, 1) for bits in chunks]
    record_id: Any = literal(PERMISSION_SET_ASSIGNMENT.key_prefix, String())
    for part in (*chars, *suffix):
        record_id = record_id.concat(part)
    values = {
        "org_id": sums.c.org_id,
        "id": type_coerce(record_id, String()),
        "assigneeid": sums.c.assigneeid,
        "permissionsetid": sums.c.permissionsetid,
        "isactive": _flag(True),
        "systemmodstamp": from_ms(sums.c.assigned_at_ms, dialect),
    }
    return select(*_typed(PERMISSION_SET_ASSIGNMENT, values))


def _empty(obj: SystemObject) -> Callable[[str, MetadataView, str], Select[Any]]:
    """Nexus has no counterpart (no public groups or queues, no record types): no rows."""

    def source(org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
        return _rows(obj, org_id, [])

    return source


SOURCES: dict[str, Callable[[str, MetadataView, str], Select[Any]]] = {
    USER.api_name: _user,
    ORGANIZATION.api_name: _organization,
    USER_ROLE.api_name: _user_role,
    PROFILE.api_name: _profile,
    PERMISSION_SET.api_name: _permission_set,
    PERMISSION_SET_ASSIGNMENT.api_name: _permission_set_assignment,
    GROUP.api_name: _empty(GROUP),
    RECORD_TYPE.api_name: _empty(RECORD_TYPE),
}


def source(obj: SystemObject, *, org_id: str, view: MetadataView, dialect: str) -> Select[Any]:
    """The object's rows of one org: columns `org_id` and one per field (`SystemField.key`)."""
    return SOURCES[obj.api_name](org_id, view, dialect)
