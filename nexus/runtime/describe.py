"""DescribeGlobal and DescribeObject: only the objects and fields the caller may see."""

from __future__ import annotations

from nexus.contracts.describe import (
    ChildRelationship,
    FieldDescribe,
    ObjectDescribe,
    ObjectSummary,
    PicklistEntry,
)
from nexus.contracts.errors import NotFound
from nexus.contracts.records import ErrorCategory
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView


class ObjectNotFound(NotFound):
    default_code = ErrorCategory.NOT_FOUND.value


def _summary(view: MetadataView, access: CallerAccess, obj: ObjectDef) -> ObjectSummary:
    rights = access.object(view, obj)
    return ObjectSummary(
        name=obj.api_name,
        label=obj.label,
        label_plural=obj.plural_label,
        key_prefix=obj.key_prefix,
        custom=obj.api_name.endswith("__c"),
        createable=rights.create,
        updateable=rights.edit,
        deletable=rights.delete,
    )


def describe_global(view: MetadataView, access: CallerAccess) -> list[ObjectSummary]:
    return sorted(
        (
            _summary(view, access, obj)
            for obj in view.objects.values()
            if access.object(view, obj).read
        ),
        key=lambda s: s.name.lower(),
    )


def _field(view: MetadataView, access: CallerAccess, obj: ObjectDef, f: FieldDef) -> FieldDescribe:
    _readable, editable = access.field(view, obj, f)
    rights = access.object(view, obj)
    precision, scale = (
        f.effective_precision if f.type in ("number", "currency", "percent") else (None, None)
    )
    return FieldDescribe(
        name=f.api_name,
        label=f.label,
        type=f.type,
        length=f.length if f.type == "text" else None,
        precision=precision,
        scale=scale,
        nillable=not f.required and not (f.api_name == "Name" and f.type == "text"),
        createable=editable and rights.create,
        updateable=editable and rights.edit,
        unique=f.unique,
        external_id=f.external_id,
        name_field=f.api_name == "Name",
        custom=f.api_name.endswith("__c"),
        default_value=f.default_value,
        calculated=f.type == "formula",
        calculated_formula=f.formula,
        picklist_values=[
            PicklistEntry(
                value=v.value, label=v.label or v.value, active=v.active, default_value=v.default
            )
            for v in f.values or ()
        ],
        restricted_picklist=f.restricted,
        reference_to=[f.reference_to] if f.reference_to else [],
        relationship_name=f.relationship_name,
        track_history=f.track_history,
    )


def describe_object(view: MetadataView, access: CallerAccess, name: str) -> ObjectDescribe:
    obj = view.object(name)
    if obj is None or not access.object(view, obj).read:
        raise ObjectNotFound(f"no object named {name!r}")
    children = [
        ChildRelationship(
            child_object=child.api_name,
            field=f.api_name,
            relationship_name=f.child_relationship_name,
            cascade_delete=f.type == "master_detail",
        )
        for child, f in view.children(obj)
        if access.object(view, child).read and access.field(view, child, f)[0]
    ]
    return ObjectDescribe(
        summary=_summary(view, access, obj),
        sharing_model=obj.sharing_model,
        fields=[_field(view, access, obj, f) for f in access.readable_fields(view, obj)],
        child_relationships=children,
    )
