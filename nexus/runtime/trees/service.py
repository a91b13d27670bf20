"""CreateRecordTree and ReadRelated.

A tree is created level by level in the caller's one unit of work: each level is one
all-or-none `mutate` batch (every record authorized as it would be alone), its children get
the lookup to the parent just created. The first failing level raises `TreeRolledBack`
inside the unit of work, so the levels before it are rolled back too: all or none.

A relationship is resolved by its name as the caller may see it: a parent relationship of a
lookup field it may read, or a child relationship of an object and field it may read; any
other name is 404, as an object it may not see.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, NotFound
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import (
    ErrorCategory,
    MutateItem,
    MutateRequest,
    RecordData,
    RecordError,
)
from nexus.contracts.trees import (
    MAX_TREE_DEPTH,
    MAX_TREE_RECORDS,
    TreeCreated,
    TreeFailure,
    TreeNode,
    TreeRequest,
    TreeResponse,
)
from nexus.platform.ids import to_18
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.records.mutate import AllOrNoneRolledBack, mutate
from nexus.runtime.records.read import SYSTEM, RecordNotFound, read_selected
from nexus.runtime.system_objects.service import refuse_system_writes

#: `mutate` marks the items an all-or-none batch did not apply with this (not their own error).
_NOT_APPLIED = "another item of this all-or-none batch failed"


class TreeRolledBack(Exception):
    """Raised inside the unit of work so it rolls back; carries the failures."""

    def __init__(self, response: TreeResponse) -> None:
        super().__init__("record tree rolled back")
        self.response = response


@dataclass
class _Pending:
    node: TreeNode
    parent_ref: str | None = None
    lookup: str | None = None  # the child's field that points at the parent


def _invalid(ref: str, message: str, *fields: str) -> TreeFailure:
    error = RecordError(category=ErrorCategory.INVALID_FIELD, message=message, fields=list(fields))
    return TreeFailure(ref=ref, errors=[error])


def child_relationship(
    view: MetadataView, access: CallerAccess, parent: ObjectDef, name: str
) -> tuple[ObjectDef, FieldDef] | None:
    """The child object and its lookup field behind `parent`'s child relationship `name`,
    when the caller may read both."""
    for child, f in view.children(parent):
        if (f.child_relationship_name or "").lower() != name.lower():
            continue
        if access.object(view, child).read and access.field(view, child, f)[0]:
            return child, f
    return None


def parent_relationship(
    view: MetadataView, access: CallerAccess, obj: ObjectDef, name: str
) -> FieldDef | None:
    for f in obj.fields:
        if f.type not in ("lookup", "master_detail") or not f.relationship_name:
            continue
        if f.relationship_name.lower() == name.lower() and access.field(view, obj, f)[0]:
            return f
    return None


def _levels(
    view: MetadataView, access: CallerAccess, request: TreeRequest
) -> tuple[list[list[_Pending]], list[TreeFailure]]:
    """The records by level (roots first), and what names no relationship the caller has."""
    levels: list[list[_Pending]] = [[_Pending(n) for n in request.records]]
    failures: list[TreeFailure] = []
    while levels[-1]:
        if len(levels) > MAX_TREE_DEPTH:
            failures.append(_invalid(levels[-1][0].node.ref, "a tree is at most 5 levels deep"))
            break
        below: list[_Pending] = []
        for pending in levels[-1]:
            node = pending.node
            parent = view.object(node.object)
            for name, children in node.children.items():
                found = child_relationship(view, access, parent, name) if parent else None
                if found is None:
                    failures.append(
                        _invalid(node.ref, f"no child relationship {name!r} on {node.object}")
                    )
                    continue
                child, lookup = found
                for c in children:
                    if c.object.lower() != child.api_name.lower():
                        message = f"{name} holds {child.api_name} records, not {c.object}"
                        failures.append(_invalid(c.ref, message))
                    below.append(_Pending(c, parent_ref=node.ref, lookup=lookup.api_name))
        levels.append(below)
    return [level for level in levels if level], failures


def _creation(node: TreeNode) -> MutateItem:
    return MutateItem(op="create", object=node.object, fields=node.fields)


async def create_tree(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    request: TreeRequest,
) -> TreeResponse:
    levels, failures = _levels(view, access, request)
    # a system object (User, Organization, ...) is read-only: the whole tree is refused
    refuse_system_writes(view, [_creation(p.node) for level in levels for p in level])
    refs = [p.node.ref for level in levels for p in level]
    if len(refs) > MAX_TREE_RECORDS:
        raise BadRequest(
            f"a tree has at most {MAX_TREE_RECORDS} records ({len(refs)} given)",
            code=ErrorCategory.LIMIT_EXCEEDED.value,
        )
    duplicated = sorted({r for r in refs if refs.count(r) > 1})
    failures += [_invalid(r, f"duplicate referenceId {r}") for r in duplicated]
    if failures:
        return TreeResponse(failures=failures)
    ids: dict[str, str] = {}
    for level in levels:
        items = []
        for p in level:
            fields = dict(p.node.fields)
            if p.lookup is not None and p.parent_ref is not None:
                fields = {k: v for k, v in fields.items() if k.lower() != p.lookup.lower()}
                fields[p.lookup] = ids[p.parent_ref]
            items.append(MutateItem(op="create", object=p.node.object, fields=fields))
        try:
            answer = await mutate(
                session,
                view=view,
                access=access,
                caller=caller,
                request=MutateRequest(items=items, all_or_none=True),
            )
        except AllOrNoneRolledBack as rolled_back:
            failed = [
                TreeFailure(ref=p.node.ref, errors=r.errors)
                for p, r in zip(level, rolled_back.response.results, strict=True)
                if r.errors and not any(_NOT_APPLIED in e.message for e in r.errors)
            ]
            raise TreeRolledBack(TreeResponse(failures=failed)) from None
        for p, result in zip(level, answer.results, strict=True):
            ids[p.node.ref] = str(result.id)
    return TreeResponse(created=[TreeCreated(ref=r, id=ids[r]) for r in refs])


def selectable(view: MetadataView, access: CallerAccess, obj: ObjectDef) -> list[str]:
    """Every field of `obj` the caller may read, system fields first (a query's select list)."""
    return ["Id", *SYSTEM, *(f.api_name for f in access.readable_fields(view, obj))]


async def related_parent(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    obj: ObjectDef,
    record_id: str,
    lookup: FieldDef,
    fields: list[str] | None,
) -> RecordData:
    """The parent record the lookup of a visible record points at (404 when none)."""
    child = await read_selected(
        session,
        view=view,
        access=access,
        object_name=obj.api_name,
        record_id=record_id,
        fields=[lookup.api_name],
    )
    parent_id = child.fields.get(lookup.api_name)
    if not parent_id:
        raise RecordNotFound(f"{obj.api_name} {record_id} has no {lookup.relationship_name}")
    return await read_selected(
        session,
        view=view,
        access=access,
        object_name=lookup.reference_to,
        record_id=str(parent_id),
        fields=fields,
    )


def readable_object(view: MetadataView, access: CallerAccess, name: str) -> ObjectDef:
    obj = view.object(name)
    if obj is None or not access.object(view, obj).read:
        raise NotFound(f"no object named {name!r}", code=ErrorCategory.NOT_FOUND.value)
    return obj


def record_id_18(record_id: str) -> str:
    try:
        return to_18(record_id)
    except ValueError:
        raise RecordNotFound("malformed record id") from None
