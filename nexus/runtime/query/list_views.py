"""List views: saved columns, filters and sort, executed through the SOQL engine."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import NotFound
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import ListViewDef, ListViewFilter
from nexus.runtime.metadata.repository import MetadataRepository
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.query.engine import QueryPage, query_current

_OPERATORS = {
    "equals": "=",
    "not_equals": "!=",
    "less": "<",
    "less_or_equal": "<=",
    "greater": ">",
    "greater_or_equal": ">=",
}


def _literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):  # SOQL date and datetime literals are unquoted
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int | float):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _like(value: Any) -> str:
    text = str(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return text.replace("'", "\\'")


def _condition(item: ListViewFilter) -> str:
    if item.operator in _OPERATORS:
        return f"{item.field} {_OPERATORS[item.operator]} {_literal(item.value)}"
    if item.operator == "contains":
        return f"{item.field} LIKE '%{_like(item.value)}%'"
    if item.operator == "starts_with":
        return f"{item.field} LIKE '{_like(item.value)}%'"
    values = item.value if isinstance(item.value, tuple) else (item.value,)
    return f"{item.field} IN ({', '.join(_literal(v) for v in values)})"


def to_soql(view: ListViewDef, *, limit: int | None = None) -> str:
    # SOQL (parsed and authorized by the engine), built from validated names and escaped values
    soql = f"SELECT {', '.join(view.columns)} FROM {view.object}"  # noqa: S608
    if view.filters:
        soql += " WHERE " + " AND ".join(_condition(f) for f in view.filters)
    if view.sort:
        soql += " ORDER BY " + ", ".join(
            f"{s.field} {'DESC' if s.descending else 'ASC'}" for s in view.sort
        )
    if limit is not None:
        soql += f" LIMIT {limit}"
    return soql


async def run_list_view(
    session: AsyncSession,
    *,
    cache: MetadataCache,
    access: CallerAccess,
    name: str,
    page_size: int = 200,
) -> tuple[ListViewDef, QueryPage]:
    """The list view's records the caller may see (columns the caller may not read fail
    like unknown ones: ask an admin to fix the view)."""
    rows = await MetadataRepository(session).active_definitions(access.org_id, "list_view")
    found = next((r for r in rows if r["name"].lower() == name.lower()), None)
    if found is None:
        raise NotFound(f"no list view named {name!r}")
    definition = ListViewDef.model_validate_json(found["body"])
    page = await query_current(
        session, cache=cache, access=access, soql=to_soql(definition), page_size=page_size
    )
    return definition, page
