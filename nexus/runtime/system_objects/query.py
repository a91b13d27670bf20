"""What the query engine needs to read the system objects: each as a derived table of the
caller's org (`SELECT ... FROM User`, a semi-join's `(SELECT Id FROM User ...)`, the
`Owner.` / `CreatedBy.` / `LastModifiedBy.` parents of every record, `Profile.Name` on User)
and which of its rows the caller may see. WHERE, ORDER BY, aggregates, LIMIT/OFFSET, COUNT()
and query locators are the engine's own (`query/engine.py` calls these).

Who sees what is decided here, in Runtime: every caller with API access reads every user,
role, profile and permission set of their own org, active or not (Salesforce's default for
User); permission-set assignments are an administrator's to read, anyone else reads their
own (Salesforce asks for View Setup, Assign Permission Sets or Manage Users). Nothing of
another org: each source is bound to the caller's org and every row is filtered on it again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_

from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.system_objects.definitions import (
    PERMISSION_SET_ASSIGNMENT,
    SystemObject,
    system_object,
)
from nexus.runtime.system_objects.sources import source


def queryable_system_object(view: MetadataView, name: str) -> SystemObject | None:
    """The system object a FROM (or a lookup's target) names, unless the org's metadata
    defines an object of that name itself (then that one is meant)."""
    return system_object(name) if view.object(name) is None else None


def system_alias(
    obj: SystemObject, *, view: MetadataView, access: CallerAccess, dialect: str, name: str
) -> Any:
    """The object's rows of the caller's org as a derived table called `name`."""
    return source(obj, org_id=access.org_id, view=view, dialect=dialect).subquery(name)


def system_visible(
    obj: SystemObject, alias: Any, access: CallerAccess, *, system: bool = False
) -> ColumnElement[bool]:
    """The rows of `alias` (the object's derived table) the caller may read; `system` (a
    formula's inputs) reads every row of the org."""
    mine: ColumnElement[bool] = alias.c.org_id == access.org_id
    if obj is PERMISSION_SET_ASSIGNMENT and not (system or access.is_admin):
        return and_(mine, alias.c.assigneeid == access.user_id)
    return mine
